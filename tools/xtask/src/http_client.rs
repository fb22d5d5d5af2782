//! A small HTTP/1.1 client over `std::net` for Fjord's gateway: keep-alive connections,
//! `Content-Length` framing, time limits on every socket operation. Used by the end-to-end
//! tests, the load generator and the `fn`/`metrics` commands.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Read/write (and connect) timeout of [`Client::connect`].
pub const IO_LIMIT: Duration = Duration::from_secs(20);

/// A parsed HTTP response.
#[derive(Debug)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// The status line's reason phrase (`Not Found`).
    pub reason: String,
    /// Headers (names lower-cased).
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// `Ok` iff the status is `status`; otherwise the status and body.
    pub fn expect(&self, status: u16) -> Result<(), String> {
        if self.status == status {
            Ok(())
        } else {
            Err(format!(
                "expected status {status}, got {} with body {:?}",
                self.status,
                self.text()
            ))
        }
    }

    /// `Ok` iff the body contains `needle`.
    pub fn expect_body_contains(&self, needle: &str) -> Result<(), String> {
        if self.text().contains(needle) {
            Ok(())
        } else {
            Err(format!("body lacks {needle:?}: {:?}", self.text()))
        }
    }

    /// `Ok` iff the body is `want` (ignoring trailing white space).
    pub fn expect_body_eq(&self, want: &str) -> Result<(), String> {
        if self.text().trim_end() == want {
            Ok(())
        } else {
            Err(format!("body is {:?}, expected {want:?}", self.text()))
        }
    }

    /// The value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A keep-alive HTTP/1.1 client connection.
pub struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    /// Connects to `addr`, with [`IO_LIMIT`] for the connection and every read and write.
    pub fn connect(addr: SocketAddr) -> Result<Client, String> {
        Client::connect_with(addr, IO_LIMIT, IO_LIMIT).map_err(|e| e.to_string())
    }

    /// Connects to `addr` within `connect_limit`; reads and writes time out after `io_limit`.
    pub fn connect_with(
        addr: SocketAddr,
        connect_limit: Duration,
        io_limit: Duration,
    ) -> std::io::Result<Client> {
        let stream = TcpStream::connect_timeout(&addr, connect_limit)?;
        stream.set_read_timeout(Some(io_limit))?;
        stream.set_write_timeout(Some(io_limit))?;
        let _ = stream.set_nodelay(true);
        Ok(Client {
            stream,
            buf: Vec::new(),
        })
    }

    /// Sends raw bytes.
    pub fn send_raw(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.stream.write_all(bytes).map_err(|e| e.to_string())
    }

    /// Sends one request and reads its response.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> Result<HttpResponse, String> {
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: fjord\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        req.extend_from_slice(body);
        self.send_raw(&req)?;
        self.read_response()
    }

    fn fill(&mut self) -> Result<usize, String> {
        let mut chunk = [0u8; 16384];
        let n = self.stream.read(&mut chunk).map_err(|e| e.to_string())?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n)
    }

    /// Reads an interim `HTTP/1.1 100 Continue` and nothing after it (the server must wait for
    /// the body).
    pub fn read_interim_continue(&mut self) -> Result<(), String> {
        const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";
        while self.buf.len() < CONTINUE.len() {
            if self.fill()? == 0 {
                return Err("connection closed before 100 Continue".to_owned());
            }
        }
        if !self.buf.starts_with(CONTINUE) {
            return Err(format!(
                "expected 100 Continue, got {:?}",
                String::from_utf8_lossy(&self.buf)
            ));
        }
        self.buf.drain(..CONTINUE.len());
        if !self.buf.is_empty() {
            return Err(format!(
                "bytes after 100 Continue before the body was sent: {:?}",
                String::from_utf8_lossy(&self.buf)
            ));
        }
        Ok(())
    }

    /// Reads one response (`Content-Length` framing).
    pub fn read_response(&mut self) -> Result<HttpResponse, String> {
        let head_end = loop {
            if let Some(p) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p;
            }
            if self.fill()? == 0 {
                return Err(format!(
                    "connection closed before a complete response head ({} bytes)",
                    self.buf.len()
                ));
            }
        };
        let head = String::from_utf8_lossy(&self.buf[..head_end]).into_owned();
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or_default();
        let (status, reason) = parse_status_line(status_line)
            .ok_or_else(|| format!("bad status line {status_line:?}"))?;
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let len: usize = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .and_then(|(_, v)| v.parse().ok())
            .ok_or("response without Content-Length")?;
        let total = head_end + 4 + len;
        while self.buf.len() < total {
            if self.fill()? == 0 {
                return Err("connection closed inside a response body".to_owned());
            }
        }
        let body = self.buf[head_end + 4..total].to_vec();
        self.buf.drain(..total);
        Ok(HttpResponse {
            status,
            reason,
            headers,
            body,
        })
    }

    /// Whether response bytes have arrived (without waiting for them).
    pub fn has_bytes(&mut self) -> Result<bool, String> {
        if !self.buf.is_empty() {
            return Ok(true);
        }
        self.stream
            .set_nonblocking(true)
            .map_err(|e| e.to_string())?;
        let mut b = [0u8; 1];
        let r = self.stream.peek(&mut b);
        self.stream
            .set_nonblocking(false)
            .map_err(|e| e.to_string())?;
        match r {
            Ok(n) => Ok(n > 0),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Whether the server closes the connection (EOF) within the I/O limit.
    pub fn closed_by_server(&mut self) -> Result<(), String> {
        match self.fill() {
            Ok(0) => Ok(()),
            Ok(_) => Err("unexpected bytes after the response".to_owned()),
            // A reset also means closed.
            Err(e) if e.contains("reset") => Ok(()),
            Err(e) => Err(format!("connection not closed: {e}")),
        }
    }
}

/// One request on a fresh connection.
pub fn one(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
) -> Result<HttpResponse, String> {
    Client::connect(addr)?.request(method, path, body)
}

/// The status code and reason phrase of an `HTTP/1.1 <code> <reason>` line.
fn parse_status_line(line: &str) -> Option<(u16, String)> {
    let rest = line.strip_prefix("HTTP/1.1 ")?;
    let status = rest.get(..3)?.parse().ok()?;
    let reason = rest.get(3..).unwrap_or_default().trim().to_owned();
    Some((status, reason))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, TcpListener};
    use std::thread;

    #[test]
    fn status_lines() {
        assert_eq!(
            parse_status_line("HTTP/1.1 404 Not Found"),
            Some((404, "Not Found".to_owned()))
        );
        assert_eq!(
            parse_status_line("HTTP/1.1 204"),
            Some((204, String::new()))
        );
        assert_eq!(parse_status_line("HTTP/1.0 200 OK"), None);
        assert_eq!(parse_status_line("HTTP/1.1 abc"), None);
    }

    #[test]
    fn reads_two_responses_on_one_connection() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let server = thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 1024];
            // Both answers after the first request: the second waits in the client's buffer.
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = s.read(&mut buf).unwrap();
                got.extend_from_slice(&buf[..n]);
            }
            s.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi\
                  HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n",
            )
            .unwrap();
            // Until the client hangs up.
            while s.read(&mut buf).unwrap_or(0) > 0 {}
        });
        let mut c = Client::connect(addr).unwrap();
        let r = c.request("GET", "/a", b"").unwrap();
        assert_eq!(
            (r.status, r.reason.as_str(), r.text().as_str()),
            (200, "OK", "hi")
        );
        let r = c.request("GET", "/b", b"").unwrap();
        assert_eq!(
            (r.status, r.reason.as_str(), r.body.len()),
            (404, "Not Found", 0)
        );
        drop(c);
        server.join().unwrap();
    }
}
