//! `kbuild.run-gdn/v1`: the one JSON document of `kbuild run gdn --json`, typed here; the
//! binary renders it.

use serde::Serialize;

use crate::bench::BenchReport;
use crate::geometry::Geometry;
use crate::parity::ParityReport;

pub const RUN_GDN_SCHEMA: &str = "kbuild.run-gdn/v1";

/// `kbuild.run-gdn/v1`: the device, the geometry, and the parity and benchmark reports that
/// ran; `passed` unless a parity check failed.
#[derive(Debug, Serialize)]
pub struct RunReport<'a> {
    pub schema: &'static str,
    pub device: &'a str,
    pub geometry: &'a Geometry,
    pub parity: Option<&'a ParityReport>,
    pub bench: Option<&'a BenchReport>,
    pub passed: bool,
}

impl<'a> RunReport<'a> {
    pub fn new(
        device: &'a str,
        geometry: &'a Geometry,
        parity: Option<&'a ParityReport>,
        bench: Option<&'a BenchReport>,
    ) -> RunReport<'a> {
        RunReport {
            schema: RUN_GDN_SCHEMA,
            device,
            geometry,
            parity,
            bench,
            passed: parity.is_none_or(ParityReport::passed),
        }
    }
}
