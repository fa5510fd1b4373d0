//! `kbuild run gdn` as one call: the request checked before any GPU work, then the parity suite
//! and the benchmark over the kernels a loader holds. The caller renders the events.

use std::path::PathBuf;

use kbuild_loader::Loader;

use crate::bench::{self, BenchOptions, BenchReport};
use crate::engine::GdnEngine;
use crate::error::{EngineError, Result};
use crate::files;
use crate::geometry::Geometry;
use crate::inputs::Inputs;
use crate::parity::{self, Check, ParityOptions, ParityReport};
use crate::report::RunReport;

/// What to run (the flags of `kbuild run gdn`, which name this request's fields in errors).
#[derive(Debug, Clone)]
pub struct RunRequest {
    pub layers: usize,
    /// Window sizes T to check and benchmark.
    pub tokens: Vec<usize>,
    /// Commit sizes n to benchmark.
    pub commits: Vec<usize>,
    /// Seeds of the generated inputs (ignored with `inputs`, except the first for a dump).
    pub seeds: Vec<u64>,
    /// A safetensors file of inputs instead of the seeded generator.
    pub inputs: Option<PathBuf>,
    /// Steps of the decode trajectory (0: none).
    pub trajectory: usize,
    /// Timed replays per benchmark row.
    pub iters: usize,
    pub check: bool,
    pub bench: bool,
}

impl RunRequest {
    /// The geometry, with every size of the request checked against it.
    pub fn geometry(&self) -> Result<Geometry> {
        let geometry = Geometry::with_layers(self.layers);
        geometry.validate()?;
        let flag = |flag: &'static str| move |source| EngineError::Request { flag, source };
        for &t in &self.tokens {
            geometry.check_tokens(t).map_err(flag("tokens"))?;
        }
        for &n in &self.commits {
            geometry
                .check_commit(n, geometry.window)
                .map_err(flag("commits"))?;
        }
        if self.seeds.is_empty() {
            return Err(EngineError::NoSeeds);
        }
        Ok(geometry)
    }
}

/// A checked request with its inputs read: what [`run_gdn`] runs.
pub struct Prepared {
    pub request: RunRequest,
    pub geometry: Geometry,
    sources: Vec<Inputs>,
}

impl RunRequest {
    /// The request checked and its inputs read (generated or from the file): before any GPU
    /// work, so a bad request fails the same with or without a GPU.
    pub fn prepare(&self) -> Result<Prepared> {
        let geometry = self.geometry()?;
        let sources = files::run_inputs(self.inputs.as_deref(), &self.seeds, geometry)?;
        Ok(Prepared {
            request: self.clone(),
            geometry,
            sources,
        })
    }
}

/// What a run reports as it goes.
pub enum RunEvent<'a> {
    Check(&'a Check),
    /// The parity suite ended: how many checks passed and failed.
    Parity {
        passed: usize,
        failed: usize,
    },
    Bench(&'a BenchReport),
}

/// A finished run.
pub struct RunOutcome {
    pub device: String,
    pub geometry: Geometry,
    pub parity: Option<ParityReport>,
    pub bench: Option<BenchReport>,
}

impl RunOutcome {
    pub fn passed(&self) -> bool {
        self.parity.as_ref().is_none_or(ParityReport::passed)
    }

    /// `kbuild.run-gdn/v1`.
    pub fn report(&self) -> RunReport<'_> {
        RunReport::new(
            &self.device,
            &self.geometry,
            self.parity.as_ref(),
            self.bench.as_ref(),
        )
    }
}

/// The engine over `loader`'s kernels: `started` gets the device's name before the first
/// check; parity (when `check`, or when `bench` is off) and the benchmark follow.
pub fn run_gdn(
    loader: &Loader,
    prepared: &Prepared,
    started: &mut dyn FnMut(&str),
    on: &mut dyn FnMut(RunEvent),
) -> Result<RunOutcome> {
    let (req, geometry, sources) = (&prepared.request, prepared.geometry, &prepared.sources);
    let mut engine = GdnEngine::new(loader, geometry)?;
    started(engine.device());
    let parity = if req.check || !req.bench {
        let opts = ParityOptions {
            tokens: req.tokens.clone(),
            trajectory_steps: req.trajectory,
            ..ParityOptions::default()
        };
        let report = parity::run(&mut engine, sources, &opts, &mut |c| on(RunEvent::Check(c)))?;
        let failed = report.checks.iter().filter(|c| !c.pass).count();
        on(RunEvent::Parity {
            passed: report.checks.len() - failed,
            failed,
        });
        Some(report)
    } else {
        None
    };
    let bench = if req.bench {
        let opts = BenchOptions {
            tokens: req.tokens.clone(),
            commits: req.commits.clone(),
            iters: req.iters,
            ..BenchOptions::default()
        };
        let report = bench::run(&mut engine, &opts, &mut |_| {})?;
        on(RunEvent::Bench(&report));
        Some(report)
    } else {
        None
    };
    Ok(RunOutcome {
        device: engine.device().to_string(),
        geometry,
        parity,
        bench,
    })
}

/// A dump written by [`dump_inputs`].
pub struct Dumped {
    pub bytes: usize,
    pub geometry: Geometry,
    /// What the inputs are (their seed or file).
    pub inputs: String,
}

/// The first seed's inputs and the fp64 reference of a full window, to `path` (no GPU).
pub fn dump_inputs(req: &RunRequest, path: &std::path::Path) -> Result<Dumped> {
    let geometry = req.geometry()?;
    let inputs = Inputs::seeded(geometry, req.seeds[0]);
    let bytes = files::write_dump(path, &inputs)?;
    Ok(Dumped {
        bytes,
        geometry,
        inputs: inputs.describe(),
    })
}
