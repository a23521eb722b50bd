//! A connection's deadlines, kept on its bytes: the HTTP/2 preface (or the
//! start of an HTTP/1.1 request) by the handshake deadline, then its first
//! authenticated call within the first-request timeout, then never a whole
//! idle timeout without a call open. Frames that are not calls (HTTP/2
//! PINGs, SETTINGS, WINDOW_UPDATEs) keep nothing open. Fails the
//! connection's reads and writes with `TimedOut` when one passes, which
//! closes it, and counts why.
use super::{Slot, Timeouts};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};
use tonic::transport::server::Connected;

/// The HTTP/2 client preface: a connection must send as many bytes (an
/// HTTP/1.1 request is longer) within the handshake timeout.
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Which deadline closed a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expired {
    Handshake,
    FirstRequest,
    Idle,
}

/// A connection that fails with `TimedOut` (and is then closed by the
/// server) when a deadline passes: see the module's documentation.
#[derive(Debug)]
pub struct Guarded<IO> {
    io: IO,
    /// Bytes read, counted up to the preface's length.
    read: usize,
    /// The next deadline to check.
    timer: Pin<Box<Sleep>>,
    /// When the first authenticated call is due; set once the preface is in.
    first_request_due: Option<Instant>,
    timeouts: Timeouts,
    /// Timed out already (counted once).
    expired: bool,
    slot: Slot,
}

fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, what.to_string())
}

impl<IO> Guarded<IO> {
    pub(super) fn new(io: IO, slot: Slot, handshake_due: Instant, timeouts: Timeouts) -> Self {
        Guarded {
            io,
            read: 0,
            timer: Box::pin(tokio::time::sleep_until(handshake_due)),
            first_request_due: None,
            timeouts,
            expired: false,
            slot,
        }
    }

    /// `bytes` came from the client: count the preface's.
    fn got(&mut self, bytes: &[u8]) {
        if self.first_request_due.is_some() {
            return;
        }
        self.read += bytes.len().min(PREFACE.len() - self.read);
        if self.read == PREFACE.len() {
            let now = Instant::now();
            self.first_request_due = Some(now + self.timeouts.first_request);
            let next = self.verdict(now).unwrap_or(now);
            self.timer.as_mut().reset(next);
        }
    }

    /// When to look again, or the deadline that has passed.
    fn verdict(&self, now: Instant) -> Result<Instant, Expired> {
        let Some(first_request_due) = self.first_request_due else {
            return Err(Expired::Handshake);
        };
        let conn = &self.slot.conn;
        let mut next = now + self.timeouts.idle;
        if !conn.is_authenticated() {
            if first_request_due <= now {
                return Err(Expired::FirstRequest);
            }
            next = next.min(first_request_due);
        }
        if let Some(since) = conn.idle_since() {
            let due = since + self.timeouts.idle;
            if due <= now {
                return Err(Expired::Idle);
            }
            next = next.min(due);
        }
        Ok(next)
    }

    /// Ready with an error once the connection is due to close; else the
    /// timer is set to wake the connection at the next deadline.
    fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        if self.expired {
            return Poll::Ready(timed_out("connection closed"));
        }
        loop {
            ready!(self.timer.as_mut().poll(cx));
            match self.verdict(Instant::now()) {
                Ok(next) => self.timer.as_mut().reset(next),
                Err(why) => {
                    self.expired = true;
                    let stats = &self.slot.conn.stats;
                    let (counter, what) = match why {
                        Expired::Handshake => {
                            (&stats.handshake_timeouts, "no HTTP/2 preface in time")
                        }
                        Expired::FirstRequest => (
                            &stats.first_request_timeouts,
                            "no authenticated call in time",
                        ),
                        Expired::Idle => (&stats.idle_timeouts, "idle connection"),
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                    return Poll::Ready(timed_out(what));
                }
            }
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
        // Deadlines first: a client whose bytes are always there (a flood
        // of PINGs) is closed as one that sends nothing.
        if let Poll::Ready(err) = this.poll_expired(cx) {
            return Poll::Ready(Err(err));
        }
        let before = buf.filled().len();
        let result = ready!(Pin::new(&mut this.io).poll_read(cx, buf));
        if buf.filled().len() > before {
            this.got(&buf.filled()[before..]);
        }
        Poll::Ready(result)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Guarded<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Poll::Ready(err) = this.poll_expired(cx) {
            return Poll::Ready(Err(err));
        }
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Poll::Ready(err) = this.poll_expired(cx) {
            return Poll::Ready(Err(err));
        }
        Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
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
    type ConnectInfo = super::calls::Info<IO::ConnectInfo>;

    fn connect_info(&self) -> Self::ConnectInfo {
        super::calls::Info::new(self.io.connect_info(), self.slot.conn.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Gate, Limits, ListenerStats, Peer};
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    /// A Unix-socket gate (any call authenticates) or a TLS one, with
    /// short deadlines: handshake 300 ms, first call 400 ms, idle 600 ms.
    fn gate(unix: bool) -> (Gate, Arc<ListenerStats>) {
        let limits = Limits {
            max_connections: Some(4),
            handshake_timeout: Duration::from_millis(300),
            first_request_timeout: Duration::from_millis(400),
            idle_timeout: Duration::from_millis(600),
            ..Limits::default()
        };
        let stats = Arc::new(ListenerStats::default());
        let g = if unix {
            Gate::unix(&limits, stats.clone())
        } else {
            Gate::tls(&limits, stats.clone())
        };
        (g, stats)
    }

    /// A guarded connection and its client end, the preface sent and read.
    async fn open(g: &Gate) -> (Guarded<DuplexStream>, DuplexStream) {
        let (server, mut client) = tokio::io::duplex(256);
        let mut guarded = g.guard(server, g.admit(Peer::Uid(1000)).unwrap());
        client.write_all(PREFACE).await.unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(guarded.read(&mut buf).await.unwrap(), PREFACE.len());
        (guarded, client)
    }

    /// The client sends 4 bytes (a PING, say) every 100 ms until the
    /// connection fails: returns how long that took.
    async fn ping_until_closed(
        guarded: &mut Guarded<DuplexStream>,
        client: &mut DuplexStream,
    ) -> Duration {
        let started = Instant::now();
        let mut buf = [0u8; 64];
        loop {
            client.write_all(b"ping").await.unwrap();
            match guarded.read(&mut buf).await {
                Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                Err(e) => {
                    assert_eq!(e.kind(), io::ErrorKind::TimedOut);
                    return started.elapsed();
                }
            }
        }
    }

    #[tokio::test]
    async fn half_a_preface_is_closed_at_the_deadline() {
        let (g, stats) = gate(true);
        let (server, mut client) = tokio::io::duplex(64);
        let started = Instant::now();
        let mut guarded = g.guard(server, g.admit(Peer::Uid(1000)).unwrap());
        client
            .write_all(&b"PRI * HTTP/2.0\r\n"[..12])
            .await
            .unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(guarded.read(&mut buf).await.unwrap(), 12);
        let err = guarded.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert_eq!(stats.handshake_timeouts.load(Ordering::Relaxed), 1);
        // Closed for good, and counted once.
        assert!(guarded.read(&mut buf).await.is_err());
        assert_eq!(stats.handshake_timeouts.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn pings_without_a_call_do_not_keep_a_tls_connection() {
        let (g, stats) = gate(false);
        let (mut guarded, mut client) = open(&g).await;
        let waited = ping_until_closed(&mut guarded, &mut client).await;
        assert!(waited >= Duration::from_millis(350), "{waited:?}");
        assert_eq!(stats.first_request_timeouts.load(Ordering::Relaxed), 1);
        drop(guarded);
        // A call without a valid token does not count either.
        let (mut guarded, mut client) = open(&g).await;
        let call = guarded.slot.conn.clone();
        call.call_started();
        call.call_ended();
        ping_until_closed(&mut guarded, &mut client).await;
        assert_eq!(stats.first_request_timeouts.load(Ordering::Relaxed), 2);
        assert_eq!(stats.idle_timeouts.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn an_open_call_keeps_a_connection_and_pings_do_not() {
        let (g, stats) = gate(true);
        let (mut guarded, mut client) = open(&g).await;
        let conn = guarded.slot.conn.clone();
        // A call open (a Watch stream, say) keeps it well past the idle
        // timeout while the client only pings...
        conn.call_started();
        assert!(conn.is_authenticated(), "a call on the Unix socket");
        let mut buf = [0u8; 64];
        let kept = tokio::time::timeout(Duration::from_millis(1500), async {
            loop {
                client.write_all(b"ping").await.unwrap();
                guarded.read_exact(&mut buf[..4]).await.unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        assert!(kept.is_err());
        // ...and once it ends, pings do not: closed an idle timeout later.
        conn.call_ended();
        let waited = ping_until_closed(&mut guarded, &mut client).await;
        assert!(waited >= Duration::from_millis(550), "{waited:?}");
        assert_eq!(stats.idle_timeouts.load(Ordering::Relaxed), 1);
        assert_eq!(stats.first_request_timeouts.load(Ordering::Relaxed), 0);
        assert_eq!(stats.handshake_timeouts.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn an_authenticated_tls_connection_lives_by_its_calls() {
        let (g, stats) = gate(false);
        let (mut guarded, mut client) = open(&g).await;
        let conn = guarded.slot.conn.clone();
        conn.call_started();
        conn.authenticate();
        conn.call_ended();
        // Past the first-request deadline, short of the idle timeout: open.
        tokio::time::sleep(Duration::from_millis(450)).await;
        client.write_all(b"x").await.unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(guarded.read(&mut buf).await.unwrap(), 1);
        let waited = ping_until_closed(&mut guarded, &mut client).await;
        assert!(waited <= Duration::from_millis(400), "{waited:?}");
        assert_eq!(stats.idle_timeouts.load(Ordering::Relaxed), 1);
        assert_eq!(stats.unauthenticated.load(Ordering::Relaxed), 0);
    }
}
