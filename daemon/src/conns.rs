//! Connections before and between calls: the cap on the connections each
//! listener holds (with a reserve for root on the Unix socket), the deadline
//! for a new connection's handshake and HTTP/2 preface, the idle timeout,
//! the HTTP/2 keepalive, and the counts of what they refused for `/metrics`.
//! Who a caller is stays `auth`'s business; the TLS handshake, `tls_listener`'s.
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{UnixListener, UnixStream};
use tokio::time::{Instant, Sleep};
use tonic::transport::server::Connected;

/// The HTTP/2 client preface: a connection must send as many bytes (an
/// HTTP/1.1 request is longer) within the handshake timeout.
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Connections root may open on the Unix socket beyond `max_connections`.
pub const ROOT_RESERVE: usize = 8;
/// Bounds of the default `max_connections`: a quarter of the open-files limit.
const DEFAULT_MAX: (usize, usize) = (16, 4096);
/// HTTP/2 keepalive: a ping after this long (or a third of the idle
/// timeout) without a frame from the client.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// How long accepting pauses after it failed (out of descriptors, say).
const ACCEPT_PAUSE: Duration = Duration::from_millis(50);

/// The connection settings (`[limits]`).
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Connections each listener holds at once; None: a quarter of the
    /// open-files limit, from 16 to 4096.
    pub max_connections: Option<usize>,
    /// How long a new connection has to finish its TLS handshake and send
    /// the HTTP/2 preface (or the start of an HTTP/1.1 request).
    pub handshake_timeout: Duration,
    /// A connection whose client sends nothing this long is closed (over
    /// HTTP/1.1: on which nothing moves either way).
    pub idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: None,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
        }
    }
}

impl Limits {
    /// `max_connections`, or the default from this process's open-files
    /// limit: the two listeners together take at most half of it.
    pub fn max_connections(&self) -> usize {
        self.max_connections.unwrap_or_else(|| {
            let nofile = rustix::process::getrlimit(rustix::process::Resource::Nofile)
                .current
                .unwrap_or(u64::MAX);
            let quarter = usize::try_from(nofile / 4).unwrap_or(usize::MAX);
            quarter.clamp(DEFAULT_MAX.0, DEFAULT_MAX.1)
        })
    }

    /// The HTTP/2 keepalive interval and ping timeout: a client that answers
    /// pings is never idle long enough to be closed, and one that does not
    /// is closed (and counted) by the idle timeout before the ping times out.
    pub fn keepalive(&self) -> (Duration, Duration) {
        let interval = KEEPALIVE_INTERVAL.min(self.idle_timeout / 3);
        (interval, self.idle_timeout + interval)
    }
}

/// What one listener holds and refused.
#[derive(Debug, Default)]
pub struct ListenerStats {
    /// Connections open now (handshakes included).
    pub open: AtomicU64,
    /// Connections closed at once: the listener was full.
    pub refused_limit: AtomicU64,
    /// Connections closed because their handshake or preface was late.
    pub handshake_timeouts: AtomicU64,
    /// Connections closed because their client went silent.
    pub idle_timeouts: AtomicU64,
}

/// Both listeners' counts.
#[derive(Debug, Default)]
pub struct Stats {
    pub unix: Arc<ListenerStats>,
    pub tls: Arc<ListenerStats>,
}

/// Admits a listener's connections and guards them.
#[derive(Debug, Clone)]
pub struct Gate {
    stats: Arc<ListenerStats>,
    max: u64,
    handshake: Duration,
    idle: Duration,
}

/// One admitted connection's place in its listener's count.
#[derive(Debug)]
pub struct Slot {
    stats: Arc<ListenerStats>,
    accepted: Instant,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.stats.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Gate {
    pub fn new(limits: &Limits, stats: Arc<ListenerStats>) -> Gate {
        Gate {
            stats,
            max: limits.max_connections() as u64,
            handshake: limits.handshake_timeout,
            idle: limits.idle_timeout,
        }
    }

    /// Turn on TCP keepalive for a TCP connection just accepted: a peer
    /// gone without a word (a host switched off, a dropped route), which
    /// HTTP/2 pings cannot reach during a TLS handshake, is found by the
    /// kernel within two keepalive intervals of its last byte.
    pub fn keep_alive(&self, stream: impl std::os::fd::AsFd) -> io::Result<()> {
        use rustix::net::sockopt;
        let idle = KEEPALIVE_INTERVAL
            .min(self.idle / 3)
            .max(Duration::from_secs(1));
        sockopt::set_tcp_keepidle(&stream, idle)?;
        sockopt::set_tcp_keepintvl(&stream, (idle / 3).max(Duration::from_secs(1)))?;
        sockopt::set_tcp_keepcnt(&stream, 3)?;
        Ok(sockopt::set_socket_keepalive(&stream, true)?)
    }

    /// A place for a connection just accepted, `extra` beyond the cap; None
    /// (counted) when the listener is full: the caller closes it at once.
    pub fn admit(&self, extra: usize) -> Option<Slot> {
        let max = self.max + extra as u64;
        let admitted = self
            .stats
            .open
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok();
        if !admitted {
            self.stats.refused_limit.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(Slot {
            stats: self.stats.clone(),
            accepted: Instant::now(),
        })
    }

    /// When the handshake of a connection admitted as `slot` must be done.
    pub fn handshake_deadline(&self, slot: &Slot) -> Instant {
        slot.accepted + self.handshake
    }

    /// Count a connection whose (TLS) handshake was late.
    pub fn handshake_timed_out(&self) {
        self.stats
            .handshake_timeouts
            .fetch_add(1, Ordering::Relaxed);
    }

    /// `io`, closed when its preface is late or when it idles.
    pub fn guard<IO>(&self, io: IO, slot: Slot) -> Guarded<IO> {
        let deadline = self.handshake_deadline(&slot);
        let now = Instant::now();
        Guarded {
            io,
            read: 0,
            http2: true,
            timer: Box::pin(tokio::time::sleep_until(deadline)),
            last_read: now,
            last_moved: now,
            idle: self.idle,
            expired: false,
            slot,
        }
    }
}

/// A connection that fails with `TimedOut` (and is then closed by the
/// server) when its first bytes come later than its handshake deadline, or
/// when it idles: over HTTP/2 (whose server pings it) when the client sends
/// nothing for the idle timeout, over HTTP/1.1 when nothing moves either way.
#[derive(Debug)]
pub struct Guarded<IO> {
    io: IO,
    /// Bytes read, counted up to the preface's length.
    read: usize,
    /// Every byte read so far matched the HTTP/2 preface.
    http2: bool,
    /// The handshake deadline, then the next idle check.
    timer: Pin<Box<Sleep>>,
    last_read: Instant,
    /// The last byte read or written.
    last_moved: Instant,
    idle: Duration,
    /// Timed out already (counted once).
    expired: bool,
    slot: Slot,
}

fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, what.to_string())
}

impl<IO> Guarded<IO> {
    fn in_preface(&self) -> bool {
        self.read < PREFACE.len()
    }

    /// `bytes` came from the client.
    fn got(&mut self, bytes: &[u8]) {
        let now = Instant::now();
        (self.last_read, self.last_moved) = (now, now);
        if self.in_preface() {
            let expected = &PREFACE[self.read..];
            let n = bytes.len().min(expected.len());
            self.http2 &= bytes[..n] == expected[..n];
            self.read += n;
            if !self.in_preface() {
                // From now on the timer checks idleness.
                let due = self.idle_since() + self.idle;
                self.timer.as_mut().reset(due);
            }
        }
    }

    fn sent(&mut self) {
        self.last_moved = Instant::now();
    }

    /// Since when the connection has been idle.
    fn idle_since(&self) -> Instant {
        if self.http2 {
            self.last_read
        } else {
            self.last_moved
        }
    }

    /// Ready with an error once the connection is due to close.
    fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let stats = &self.slot.stats;
        if self.expired {
            return Poll::Ready(timed_out("connection closed"));
        }
        loop {
            ready!(self.timer.as_mut().poll(cx));
            if self.in_preface() {
                self.expired = true;
                stats.handshake_timeouts.fetch_add(1, Ordering::Relaxed);
                return Poll::Ready(timed_out("no HTTP/2 preface in time"));
            }
            let due = self.idle_since() + self.idle;
            if due <= Instant::now() {
                self.expired = true;
                stats.idle_timeouts.fetch_add(1, Ordering::Relaxed);
                return Poll::Ready(timed_out("idle connection"));
            }
            self.timer.as_mut().reset(due);
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Guarded<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.expired {
            let before = buf.filled().len();
            if let Poll::Ready(result) = Pin::new(&mut this.io).poll_read(cx, buf) {
                if buf.filled().len() > before {
                    this.got(&buf.filled()[before..]);
                }
                return Poll::Ready(result);
            }
        }
        this.poll_expired(cx).map(Err)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Guarded<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if !this.expired {
            if let Poll::Ready(result) = Pin::new(&mut this.io).poll_write(cx, buf) {
                if matches!(result, Ok(n) if n > 0) {
                    this.sent();
                }
                return Poll::Ready(result);
            }
        }
        this.poll_expired(cx).map(Err)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if !this.expired {
            if let Poll::Ready(result) = Pin::new(&mut this.io).poll_write_vectored(cx, bufs) {
                if matches!(result, Ok(n) if n > 0) {
                    this.sent();
                }
                return Poll::Ready(result);
            }
        }
        this.poll_expired(cx).map(Err)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

impl<IO: Connected> Connected for Guarded<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

/// The Unix socket's connections, admitted and guarded: root may open
/// [`ROOT_RESERVE`] beyond the cap, so that an administrator still gets in
/// when other users fill it.
pub struct UnixIncoming {
    listener: UnixListener,
    gate: Gate,
    pause: Option<Pin<Box<Sleep>>>,
}

impl UnixIncoming {
    pub fn new(listener: UnixListener, gate: Gate) -> UnixIncoming {
        UnixIncoming {
            listener,
            gate,
            pause: None,
        }
    }
}

impl tokio_stream::Stream for UnixIncoming {
    type Item = io::Result<Guarded<UnixStream>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(pause) = &mut this.pause {
                ready!(pause.as_mut().poll(cx));
                this.pause = None;
            }
            let stream = match ready!(this.listener.poll_accept(cx)) {
                Ok((stream, _)) => stream,
                Err(err) => {
                    tracing::debug!(%err, "accept failed");
                    this.pause = Some(Box::pin(tokio::time::sleep(ACCEPT_PAUSE)));
                    continue;
                }
            };
            let root = stream.peer_cred().is_ok_and(|c| c.uid() == 0);
            let extra = if root { ROOT_RESERVE } else { 0 };
            match this.gate.admit(extra) {
                Some(slot) => return Poll::Ready(Some(Ok(this.gate.guard(stream, slot)))),
                None => tracing::debug!("Unix socket full: connection closed"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn gate(max: usize) -> Gate {
        let limits = Limits {
            max_connections: Some(max),
            handshake_timeout: Duration::from_millis(300),
            idle_timeout: Duration::from_millis(600),
        };
        Gate::new(&limits, Arc::default())
    }

    #[test]
    fn tcp_connections_are_kept_alive() {
        use rustix::net::sockopt;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (stream, _) = listener.accept().unwrap();
        assert!(!sockopt::socket_keepalive(&stream).unwrap());
        let gate = Gate::new(&Limits::default(), Arc::default());
        gate.keep_alive(&stream).unwrap();
        assert!(sockopt::socket_keepalive(&stream).unwrap());
        assert_eq!(
            sockopt::tcp_keepidle(&stream).unwrap(),
            Duration::from_secs(30)
        );
        assert_eq!(
            sockopt::tcp_keepintvl(&stream).unwrap(),
            Duration::from_secs(10)
        );
        assert_eq!(sockopt::tcp_keepcnt(&stream).unwrap(), 3);
    }

    #[test]
    fn the_cap_refuses_and_counts_and_frees_on_close() {
        let g = gate(2);
        let a = g.admit(0).unwrap();
        let _b = g.admit(0).unwrap();
        assert!(g.admit(0).is_none());
        let root = g.admit(1).expect("the reserve");
        assert!(g.admit(1).is_none());
        assert_eq!(g.stats.refused_limit.load(Ordering::Relaxed), 2);
        drop((a, root));
        assert_eq!(g.stats.open.load(Ordering::Relaxed), 1);
        assert!(g.admit(0).is_some());
    }

    #[tokio::test]
    async fn half_a_preface_is_closed_at_the_deadline() {
        let g = gate(4);
        let (server, mut client) = tokio::io::duplex(64);
        let started = Instant::now();
        let mut guarded = g.guard(server, g.admit(0).unwrap());
        client
            .write_all(&b"PRI * HTTP/2.0\r\n"[..12])
            .await
            .unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(guarded.read(&mut buf).await.unwrap(), 12);
        let err = guarded.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert_eq!(g.stats.handshake_timeouts.load(Ordering::Relaxed), 1);
        // Closed for good, and counted once.
        assert!(guarded.read(&mut buf).await.is_err());
        assert_eq!(g.stats.handshake_timeouts.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn http1_idles_out_only_when_nothing_moves() {
        let g = gate(4);
        let (server, mut client) = tokio::io::duplex(64);
        let mut guarded = g.guard(server, g.admit(0).unwrap());
        let mut buf = [0u8; 64];
        let request = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        client.write_all(request).await.unwrap();
        assert_eq!(guarded.read(&mut buf).await.unwrap(), request.len());
        // A response being written keeps it open well past the idle timeout...
        for _ in 0..6 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            guarded.write_all(b"data").await.unwrap();
            client.read_exact(&mut buf[..4]).await.unwrap();
        }
        // ...and silence closes it.
        let started = Instant::now();
        let err = guarded.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_millis(500));
        assert_eq!(g.stats.idle_timeouts.load(Ordering::Relaxed), 1);
        assert_eq!(g.stats.handshake_timeouts.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn http2_idles_out_when_the_client_stops_answering() {
        let g = gate(4);
        let (server, mut client) = tokio::io::duplex(64);
        let mut guarded = g.guard(server, g.admit(0).unwrap());
        let mut buf = [0u8; 64];
        client.write_all(PREFACE).await.unwrap();
        assert_eq!(guarded.read(&mut buf).await.unwrap(), PREFACE.len());
        // Pings answered keep it open well past the idle timeout...
        for _ in 0..6 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            guarded.write_all(b"ping").await.unwrap();
            client.read_exact(&mut buf[..4]).await.unwrap();
            client.write_all(b"ack").await.unwrap();
            guarded.read_exact(&mut buf[..3]).await.unwrap();
        }
        // ...pings unanswered do not: after 1 s of them the next read fails.
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            guarded.write_all(b"ping").await.unwrap();
            client.read_exact(&mut buf[..4]).await.unwrap();
        }
        let err = guarded.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(g.stats.idle_timeouts.load(Ordering::Relaxed), 1);
    }
}
