//! Tag listing: `tags/list` pages followed through `Link: rel=next` on the registry's own
//! origin, within [`MAX_TAG_PAGES`] pages, [`MAX_TAGS`] tags and [`MAX_TAG_PAGE`] bytes a page.

use serde::Deserialize;

use super::body::{read_all, Body};
use super::{OciClient, OciError, MAX_TAGS, MAX_TAG_PAGE, MAX_TAG_PAGES};
use crate::progress::Progress;

impl OciClient {
    /// The repository's tags, in the registry's order, following `Link: rel=next` on the
    /// registry's own origin only, at most [`MAX_TAG_PAGES`] pages and [`MAX_TAGS`] tags.
    pub fn tags(&self, progress: &dyn Progress) -> Result<Vec<String>, OciError> {
        let first = self.url("tags/list");
        let mut tags = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        let mut next = Some(first.clone());
        while let Some(url) = next.take() {
            if seen.len() >= MAX_TAG_PAGES {
                return Err(OciError::Invalid(format!(
                    "GET {first}: the registry's tags/list goes on past {MAX_TAG_PAGES} pages ({} tags so far); refusing an endless tag list",
                    tags.len()
                )));
            }
            if !seen.insert(url.clone()) {
                return Err(OciError::Invalid(format!(
                    "GET {url}: the registry's tags/list Link points back to a page already read; refusing a tag list that loops"
                )));
            }
            let resp = match self.retry(progress, || {
                self.exchange("GET", &url, &[], None, false, Body::Document)
            }) {
                Err(OciError::Status { code: 404, .. }) if url == first => return Ok(Vec::new()),
                r => r?,
            };
            let link = resp.header("Link").map(str::to_string);
            #[derive(Deserialize)]
            struct Tags {
                #[serde(default)]
                tags: Option<Vec<String>>,
            }
            let body = read_all(resp, MAX_TAG_PAGE, None).map_err(|e| {
                if e.kind() == std::io::ErrorKind::FileTooLarge {
                    OciError::Invalid(format!(
                        "GET {url}: a tags/list page larger than {MAX_TAG_PAGE} bytes; refusing it"
                    ))
                } else {
                    self.transport("GET", &url, e)
                }
            })?;
            let t: Tags = serde_json::from_slice(&body)
                .map_err(|e| OciError::Invalid(format!("GET {url}: tags/list answer: {e}")))?;
            tags.extend(t.tags.unwrap_or_default());
            if tags.len() > MAX_TAGS {
                return Err(OciError::Invalid(format!(
                    "GET {first}: the registry's tags/list holds more than {MAX_TAGS} tags (after {} pages); refusing an endless tag list",
                    seen.len()
                )));
            }
            if let Some(l) = link {
                next = self.next_link(&url, &l)?;
            }
        }
        Ok(tags)
    }

    /// The `rel="next"` target of a tags/list `Link` header (`</v2/repo/tags/list?last=x>;
    /// rel="next"`), made absolute; an error when it leaves the registry's origin.
    pub(super) fn next_link(&self, url: &str, link: &str) -> Result<Option<String>, OciError> {
        let Some(target) = link
            .trim()
            .strip_prefix('<')
            .and_then(|s| s.split_once('>'))
            .filter(|(_, params)| {
                params
                    .split(';')
                    .any(|p| p.to_ascii_lowercase().replace([' ', '"'], "") == "rel=next")
            })
            .map(|(t, _)| t.to_string())
        else {
            return Ok(None);
        };
        let next = self.absolute(&target);
        if !self.same_origin(&next) {
            return Err(OciError::Invalid(format!(
                "GET {url}: the tags/list Link points to another origin ({next}) than the registry ({}); refusing to follow it",
                self.base
            )));
        }
        Ok(Some(next))
    }
}
