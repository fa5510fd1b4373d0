use std::collections::BTreeMap;
use std::sync::Mutex;

use super::*;
use crate::auth::Credentials;

#[test]
fn references_parse_and_refuse_credentials() {
    assert_eq!(
        parse_reference("oci://127.0.0.1:5000/a/b").unwrap(),
        ("127.0.0.1:5000".to_string(), "a/b".to_string())
    );
    assert_eq!(
        parse_reference("oci://host").unwrap(),
        ("host".to_string(), String::new())
    );
    assert!(parse_reference("oci://u:p@host/r").is_err());
    assert!(parse_reference("oci://host/Upper").is_err());
    assert!(parse_reference("http://host/r").is_err());
}

#[test]
fn links_and_locations_stay_on_the_registry_origin() {
    let c = OciClient::new(
        "127.0.0.1:5000",
        "r",
        OciOptions {
            plain_http: true,
            ..OciOptions::default()
        },
    );
    let url = "http://127.0.0.1:5000/v2/r/tags/list";
    assert_eq!(
        c.next_link(url, r#"</v2/r/tags/list?last=a&n=2>; rel="next""#)
            .unwrap()
            .as_deref(),
        Some("http://127.0.0.1:5000/v2/r/tags/list?last=a&n=2")
    );
    assert!(c
        .next_link(
            url,
            "<http://127.0.0.1:5000/v2/r/tags/list?last=b>;rel=next"
        )
        .unwrap()
        .is_some());
    assert_eq!(c.next_link(url, r#"</v2/r/x>; rel="prev""#).unwrap(), None);
    for foreign in [
        "http://127.0.0.1:5001/v2/r/tags/list",
        "https://127.0.0.1:5000/v2/r/tags/list",
        "http://localhost:5000/v2/r/tags/list",
    ] {
        let e = c
            .next_link(url, &format!("<{foreign}>; rel=\"next\""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("another origin") && e.contains(foreign), "{e}");
        let e = c
            .upload_location("POST", url, foreign)
            .unwrap_err()
            .to_string();
        assert!(e.contains("Location") && e.contains(foreign), "{e}");
    }
    assert_eq!(
        c.upload_location("POST", url, "/v2/r/blobs/uploads/1?s=2")
            .unwrap(),
        "http://127.0.0.1:5000/v2/r/blobs/uploads/1?s=2"
    );
    // A declared size over the cap is refused before any request.
    let small = OciClient::new(
        "127.0.0.1:1",
        "r",
        OciOptions {
            plain_http: true,
            max_layer_bytes: 10,
            ..OciOptions::default()
        },
    );
    let d = Descriptor {
        media_type: LAYER_MEDIA_TYPE.into(),
        digest: format!("sha256:{}", "0".repeat(64)),
        size: 11,
        artifact_type: None,
        annotations: BTreeMap::new(),
    };
    let e = small.get_blob(&d, &crate::progress::Silent).unwrap_err();
    assert!(
        matches!(
            e,
            OciError::TooLarge {
                declared: 11,
                limit: 10,
                ..
            }
        ),
        "{e}"
    );
}

/// The bearer flow (401 + `WWW-Authenticate: Bearer` → token endpoint with the basic
/// credentials → retry with the token) against a minimal in-process HTTP responder: the
/// test registry (distribution 2.8 with htpasswd) only does basic auth.
#[test]
fn bearer_token_flow() {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(Mutex::new(Vec::<String>::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().take(8) {
            let Ok(stream) = conn else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut out = stream;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                let mut authz = String::new();
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                    if h.to_ascii_lowercase().starts_with("authorization:") {
                        authz = h[14..].trim().to_string();
                    }
                }
                log.lock().unwrap().push(format!("{} {authz}", line.trim()));
                let (status, extra, body) = if line.starts_with("GET /token") {
                    if authz == format!("Basic {}", base64_of("u:p")) {
                        ("200 OK", String::new(), r#"{"token":"T0K"}"#.to_string())
                    } else {
                        ("401 Unauthorized", String::new(), String::new())
                    }
                } else if authz == "Bearer T0K" {
                    (
                        "200 OK",
                        String::new(),
                        r#"{"name":"r","tags":["1.0.0","x"]}"#.to_string(),
                    )
                } else {
                    (
                        "401 Unauthorized",
                        format!("WWW-Authenticate: Bearer realm=\"http://127.0.0.1:{port}/token\",service=\"reg\",scope=\"repository:r:pull\"\r\n"),
                        String::new(),
                    )
                };
                let _ = write!(
                    out,
                    "HTTP/1.1 {status}\r\n{extra}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
            }
        }
    });
    fn base64_of(s: &str) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(s)
    }
    let opts = OciOptions {
        plain_http: true,
        retries: 0,
        ..OciOptions::default()
    };
    let c = OciClient::new(&format!("127.0.0.1:{port}"), "r", opts).with_credentials(Some(
        Credentials {
            user: "u".into(),
            password: "p".into(),
            source: "test".into(),
        },
    ));
    let tags = c.tags(&crate::progress::Silent).unwrap();
    assert_eq!(tags, ["1.0.0", "x"]);
    drop(c);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(
        seen[0].starts_with("GET /v2/r/tags/list") && seen[0].ends_with("HTTP/1.1 "),
        "{seen:?}"
    );
    assert!(
        seen[1].starts_with("GET /token?service=reg&scope=repository%3Ar%3Apull"),
        "{seen:?}"
    );
    assert!(seen[2].ends_with("Bearer T0K"), "{seen:?}");
    // Wrong credentials: the token endpoint refuses, and the message says where they came from.
    let bad = OciClient::new(
        &format!("127.0.0.1:{port}"),
        "r",
        OciOptions {
            plain_http: true,
            retries: 0,
            ..OciOptions::default()
        },
    )
    .with_credentials(Some(Credentials {
        user: "u".into(),
        password: "nope".into(),
        source: "test-env".into(),
    }));
    let e = bad.tags(&crate::progress::Silent).unwrap_err().to_string();
    assert!(
        e.contains("token endpoint refused") && e.contains("test-env") && !e.contains("nope"),
        "{e}"
    );
}
