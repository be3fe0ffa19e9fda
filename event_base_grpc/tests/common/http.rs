//! A plain HTTP/1.1 client over a `TcpStream`, written here: what `curl`, Prometheus or a
//! script sends, with nothing in between. One request per connection (`Connection: close`).

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::WAIT;

/// An answer: status code, headers (names lower-cased), body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("a JSON body ({e}): {}", self.body))
    }
}

/// `GET path` with `authorization` as the header's value, if any.
pub async fn get(addr: SocketAddr, path: &str, authorization: Option<&str>) -> Answer {
    let mut headers = Vec::new();
    if let Some(value) = authorization {
        headers.push(("Authorization", value.to_owned()));
    }
    request(addr, "GET", path, &headers, None).await
}

/// `POST path` with a JSON `body`, `Authorization: Bearer <token>` if a token is given.
pub async fn post_json(addr: SocketAddr, path: &str, token: Option<&str>, body: &str) -> Answer {
    let mut headers = vec![("Content-Type", "application/json".to_owned())];
    if let Some(token) = token {
        headers.push(("Authorization", format!("Bearer {token}")));
    }
    request(addr, "POST", path, &headers, Some(body)).await
}

/// Any request (`Host: <addr>` unless `headers` name another); reads until the server
/// closes.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: Option<&str>,
) -> Answer {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut request = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        request.push_str(&format!("Host: {addr}\r\n"));
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    if let Some(body) = body {
        request.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    request.push_str("\r\n");
    request.push_str(body.unwrap_or_default());
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut raw))
        .await
        .expect("the server answers and closes")
        .unwrap();
    let raw = String::from_utf8(raw).expect("a text answer");
    let (head, body) = raw.split_once("\r\n\r\n").expect("a head and a body");
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    assert!(
        headers.iter().all(|(n, _)| n != "transfer-encoding"),
        "a length-delimited body"
    );
    Answer {
        status,
        headers,
        body: body.to_owned(),
    }
}
