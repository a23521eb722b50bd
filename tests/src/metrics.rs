//! Scraping a daemon's `/metrics` (plain HTTP) and reading one sample.
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// `GET /metrics`: the lines of the body.
pub fn scrape(addr: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read /metrics");
    text
}

/// The value of one sample (name with its labels) in a scrape.
pub fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no sample {name} in /metrics:\n{text}"))
}
