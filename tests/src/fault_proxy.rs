//! A loopback HTTP fault proxy in front of the real registry. Every client connection carries
//! one request (the proxy answers `Connection: close`); the request is matched against a list
//! of rules, each good for a number of hits, and the first live rule that matches decides the
//! fault: drop the connection, cut an upload short, answer a status, forward but drop the
//! answer, slow the body, truncate it, or alter its bytes (a wrong digest). Unmatched requests
//! are forwarded untouched. Every request is logged with what was done to it.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What to do to a matching request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Read the request head, then close without an answer.
    Drop,
    /// Read half the request body (an upload), then close.
    CutUpload,
    /// Answer this status with an empty body, without forwarding.
    Status(u16),
    /// Forward (the registry acts on it), then close without passing the answer on.
    DropAnswer,
    /// Forward, pass the answer on in 512-byte pieces, `ms` milliseconds apart.
    Slow { ms: u64 },
    /// Wait `ms` milliseconds, then forward.
    Hold { ms: u64 },
    /// Forward, pass on the head (with the full Content-Length) and half the body, close.
    Truncate,
    /// Forward, flip one byte in the middle of the body (same length: a wrong digest).
    Corrupt,
    /// Forward, append this many spaces to the body and fix Content-Length (a hostile
    /// registry serving an oversize document).
    Inflate(usize),
}

/// A fault for requests whose method is `method` and whose path contains `path`, for the
/// next `times` such requests.
#[derive(Debug, Clone)]
pub struct Rule {
    pub method: &'static str,
    pub path: &'static str,
    pub fault: Fault,
    pub times: usize,
}

impl Rule {
    pub fn new(method: &'static str, path: &'static str, fault: Fault, times: usize) -> Rule {
        Rule {
            method,
            path,
            fault,
            times,
        }
    }
}

/// One request seen by the proxy.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub fault: Option<Fault>,
}

pub struct FaultProxy {
    pub port: u16,
    rules: Arc<Mutex<Vec<Rule>>>,
    log: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
}

impl FaultProxy {
    pub fn start(upstream: u16) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind fault proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let rules: Arc<Mutex<Vec<Rule>>> = Arc::default();
        let log: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (r, l, s) = (rules.clone(), log.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = conn else { continue };
                let (r, l) = (r.clone(), l.clone());
                std::thread::spawn(move || serve(client, upstream, &r, &l));
            }
        });
        FaultProxy {
            port,
            rules,
            log,
            stop,
        }
    }

    /// `oci://127.0.0.1:PORT/REPO` through the proxy.
    pub fn url(&self, repo: &str) -> String {
        format!("oci://127.0.0.1:{}/{repo}", self.port)
    }

    /// Replace the rules.
    pub fn set(&self, rules: Vec<Rule>) {
        if let Ok(mut r) = self.rules.lock() {
            *r = rules;
        }
    }

    /// Faults injected so far (requests a rule acted on).
    pub fn injected(&self) -> Vec<Seen> {
        self.log
            .lock()
            .map(|l| l.iter().filter(|s| s.fault.is_some()).cloned().collect())
            .unwrap_or_default()
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    pub fn clear_log(&self) {
        if let Ok(mut l) = self.log.lock() {
            l.clear();
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// A parsed request: head text (without the final blank line) and the Content-Length.
struct Head {
    method: String,
    path: String,
    lines: Vec<String>,
    content_length: usize,
}

/// Read up to and including `\r\n\r\n`; returns (head bytes, bytes read past it).
fn read_head(s: &mut TcpStream) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            let rest = buf.split_off(i + 4);
            return Some((buf, rest));
        }
        if buf.len() > 1 << 20 {
            return None;
        }
        let n = s.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn parse_head(bytes: &[u8]) -> Option<Head> {
    let text = String::from_utf8_lossy(bytes);
    let mut lines: Vec<String> = text
        .split("\r\n")
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    if lines.is_empty() {
        return None;
    }
    let first = lines.remove(0);
    let mut parts = first.split(' ');
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let content_length = header(&lines, "content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut all = vec![first];
    all.extend(lines);
    Some(Head {
        method,
        path,
        lines: all,
        content_length,
    })
}

fn header(lines: &[String], name: &str) -> Option<String> {
    lines.iter().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_string())
    })
}

/// The head with `Connection: close` in place of any Connection header.
fn closing(lines: &[String]) -> Vec<u8> {
    let mut out = String::new();
    for l in lines {
        if l.to_ascii_lowercase().starts_with("connection:") {
            continue;
        }
        out.push_str(l);
        out.push_str("\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    out.into_bytes()
}

fn pick(rules: &Mutex<Vec<Rule>>, head: &Head) -> Option<Fault> {
    let mut rules = rules.lock().ok()?;
    let r = rules
        .iter_mut()
        .find(|r| r.times > 0 && r.method == head.method && head.path.contains(r.path))?;
    r.times -= 1;
    Some(r.fault)
}

fn serve(mut client: TcpStream, upstream: u16, rules: &Mutex<Vec<Rule>>, log: &Mutex<Vec<Seen>>) {
    let _ = client.set_read_timeout(Some(Duration::from_secs(30)));
    let Some((head_bytes, mut body)) = read_head(&mut client) else {
        return;
    };
    let Some(head) = parse_head(&head_bytes) else {
        return;
    };
    let fault = pick(rules, &head);
    if let Ok(mut l) = log.lock() {
        l.push(Seen {
            method: head.method.clone(),
            path: head.path.clone(),
            fault,
        });
    }
    match fault {
        Some(Fault::Drop) => {
            let _ = client.shutdown(Shutdown::Both);
            return;
        }
        Some(Fault::CutUpload) => {
            let want = head.content_length / 2;
            let mut chunk = [0u8; 8192];
            while body.len() < want {
                match client.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => body.extend_from_slice(&chunk[..n]),
                }
            }
            let _ = client.shutdown(Shutdown::Both);
            return;
        }
        Some(Fault::Status(code)) => {
            let _ = client.write_all(
                format!(
                    "HTTP/1.1 {code} Injected\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                )
                .as_bytes(),
            );
            return;
        }
        Some(Fault::Hold { ms }) => {
            std::thread::sleep(Duration::from_millis(ms));
            // The rest of the body first: while unread bytes of it sit in the socket, a peek
            // sees them and not that the client has gone.
            if !read_body(&mut client, &mut body, head.content_length) {
                return;
            }
            // A client killed meanwhile: its request must not reach the registry.
            if client_gone(&client) {
                return;
            }
        }
        _ => {}
    }
    // The whole request body, then forward it.
    if !read_body(&mut client, &mut body, head.content_length) {
        return;
    }
    let Ok(mut server) = TcpStream::connect(("127.0.0.1", upstream)) else {
        return;
    };
    if server.write_all(&closing(&head.lines)).is_err() || server.write_all(&body).is_err() {
        return;
    }
    let mut answer = Vec::new();
    if server.read_to_end(&mut answer).is_err() {
        return;
    }
    if fault == Some(Fault::DropAnswer) {
        let _ = client.shutdown(Shutdown::Both);
        return;
    }
    let split = find(&answer, b"\r\n\r\n")
        .map(|i| i + 4)
        .unwrap_or(answer.len());
    let (ahead, abody) = answer.split_at(split);
    let mut abody = abody.to_vec();
    match fault {
        Some(Fault::Truncate) if !abody.is_empty() => {
            let _ = client.write_all(ahead);
            let _ = client.write_all(&abody[..abody.len() / 2]);
            let _ = client.shutdown(Shutdown::Both);
        }
        Some(Fault::Slow { ms }) => {
            let _ = client.write_all(ahead);
            for piece in abody.chunks(512) {
                if client.write_all(piece).is_err() {
                    return;
                }
                let _ = client.flush();
                std::thread::sleep(Duration::from_millis(ms));
            }
        }
        Some(Fault::Inflate(n)) => {
            let text = String::from_utf8_lossy(ahead);
            let mut head = String::new();
            for l in text.split("\r\n").filter(|l| !l.is_empty()) {
                if !l.to_ascii_lowercase().starts_with("content-length:") {
                    head.push_str(l);
                    head.push_str("\r\n");
                }
            }
            head.push_str(&format!("Content-Length: {}\r\n\r\n", abody.len() + n));
            abody.resize(abody.len() + n, b' ');
            let _ = client.write_all(head.as_bytes());
            let _ = client.write_all(&abody);
        }
        Some(Fault::Corrupt) if !abody.is_empty() => {
            let i = abody.len() / 2;
            abody[i] ^= 0x20;
            let _ = client.write_all(ahead);
            let _ = client.write_all(&abody);
        }
        _ => {
            let _ = client.write_all(&answer);
        }
    }
    let _ = client.shutdown(Shutdown::Write);
}

/// Whether the client closed its end (a killed process).
/// Read from `client` until `body` holds `len` bytes; false when the client stops first.
fn read_body(client: &mut TcpStream, body: &mut Vec<u8>, len: usize) -> bool {
    let mut chunk = vec![0u8; 64 << 10];
    while body.len() < len {
        match client.read(&mut chunk) {
            Ok(0) | Err(_) => return false,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    true
}

fn client_gone(client: &TcpStream) -> bool {
    if client.set_nonblocking(true).is_err() {
        return true;
    }
    let mut b = [0u8; 1];
    let gone = match client.peek(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    };
    let _ = client.set_nonblocking(false);
    gone
}

/// One plain HTTP/1.1 request to 127.0.0.1:`port` (for looking at the registry directly):
/// (status, body).
pub fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<(u16, Vec<u8>)> {
    http_full(port, method, path, headers, body).map(|(c, _, b)| (c, b))
}

/// As [`http`], with the answer's header lines too.
pub fn http_full(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<(u16, Vec<String>, Vec<u8>)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    s.write_all(req.as_bytes())?;
    s.write_all(body)?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer)?;
    let split = find(&answer, b"\r\n\r\n")
        .map(|i| i + 4)
        .unwrap_or(answer.len());
    let head = String::from_utf8_lossy(&answer[..split]).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let lines = head
        .split("\r\n")
        .skip(1)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    Ok((status, lines, answer[split..].to_vec()))
}

/// The value of header `name` in `lines`.
pub fn header_value(lines: &[String], name: &str) -> Option<String> {
    header(lines, name)
}

/// The registry's tags for `repo`, asked directly (not through any proxy).
pub fn tags(port: u16, repo: &str) -> Vec<String> {
    let Ok((200, body)) = http(port, "GET", &format!("/v2/{repo}/tags/list"), &[], &[]) else {
        return Vec::new();
    };
    serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["tags"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|t| t.as_str().map(str::to_string))
        .collect()
}

/// Upload `bytes` as a blob of `repo` straight to the registry on 127.0.0.1:`port`
/// (monolithic POST, then PUT with the digest); returns the digest.
pub fn put_blob(port: u16, repo: &str, bytes: &[u8]) -> String {
    let digest = format!("sha256:{}", kbuild_base::digest::sha256_hex(bytes));
    let (code, lines, body) = http_full(
        port,
        "POST",
        &format!("/v2/{repo}/blobs/uploads/"),
        &[],
        &[],
    )
    .expect("registry answers");
    assert_eq!(code, 202, "{}", String::from_utf8_lossy(&body));
    let loc = header_value(&lines, "location").expect("upload location");
    let path = match loc.find("/v2/") {
        Some(i) => loc[i..].to_string(),
        None => loc,
    };
    let sep = if path.contains('?') { '&' } else { '?' };
    let (code, body) = http(
        port,
        "PUT",
        &format!("{path}{sep}digest={digest}"),
        &[("Content-Type", "application/octet-stream")],
        bytes,
    )
    .expect("registry answers");
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&body));
    digest
}
