//! A connection's calls, seen from the servers' service stack: each request
//! is a call open on its connection until its response ends or is dropped
//! (so a connection is idle only with no call open, whatever frames its
//! client sends), a call on the Unix socket authenticates its connection,
//! and each request carries its [`Connection`] so that `auth` can mark a
//! TLS connection authenticated once a call brings a valid token.
use super::Conn;
use axum::body::HttpBody;
use axum::http::{Request, Response};
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// What a guarded connection gives the server for its requests: the
/// wrapped transport's own connection info, and the connection's state.
/// [`CallsLayer`] takes it apart again, so that the services find the
/// transport's info (`UdsConnectInfo`, `TlsConnectInfo`) as usual.
#[derive(Debug, Clone)]
pub struct Info<I> {
    io: I,
    conn: Arc<Conn>,
}

impl<I> Info<I> {
    pub(super) fn new(io: I, conn: Arc<Conn>) -> Info<I> {
        Info { io, conn }
    }
}

/// The connection a request came on (a request extension).
#[derive(Debug, Clone)]
pub struct Connection(Arc<Conn>);

impl Connection {
    /// A call on it brought a valid token: it leaves the share of
    /// unauthenticated connections, and its first-request deadline no
    /// longer holds.
    pub fn authenticated(&self) {
        self.0.authenticate();
    }
}

/// Counts the calls of the connections whose transport info is `I`.
#[derive(Debug)]
pub struct CallsLayer<I>(PhantomData<fn() -> I>);

impl<I> CallsLayer<I> {
    pub fn new() -> CallsLayer<I> {
        CallsLayer(PhantomData)
    }
}

impl<I> Default for CallsLayer<I> {
    fn default() -> Self {
        CallsLayer::new()
    }
}

impl<I> Clone for CallsLayer<I> {
    fn clone(&self) -> Self {
        CallsLayer::new()
    }
}

impl<S, I> tower::Layer<S> for CallsLayer<I> {
    type Service = Calls<S, I>;

    fn layer(&self, inner: S) -> Calls<S, I> {
        Calls {
            inner,
            info: PhantomData,
        }
    }
}

/// The service [`CallsLayer`] makes.
#[derive(Debug)]
pub struct Calls<S, I> {
    inner: S,
    info: PhantomData<fn() -> I>,
}

impl<S: Clone, I> Clone for Calls<S, I> {
    fn clone(&self) -> Self {
        Calls {
            inner: self.inner.clone(),
            info: PhantomData,
        }
    }
}

/// One open call: ended when dropped (with its response body, or with the
/// response future when the call is cancelled before answering).
#[derive(Debug)]
struct Call(Arc<Conn>);

impl Drop for Call {
    fn drop(&mut self) {
        self.0.call_ended();
    }
}

impl<S, I, B, R> tower::Service<Request<B>> for Calls<S, I>
where
    S: tower::Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    R: Send + 'static,
    I: Clone + Send + Sync + 'static,
{
    type Response = Response<Tracked<R>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let call = req.extensions_mut().remove::<Info<I>>().map(|info| {
            req.extensions_mut().insert(info.io);
            req.extensions_mut().insert(Connection(info.conn.clone()));
            info.conn.call_started();
            Call(info.conn)
        });
        let answer = self.inner.call(req);
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|body| Tracked { body, _call: call }))
        })
    }
}

/// A response body that holds its call open until it is dropped.
#[derive(Debug)]
pub struct Tracked<B> {
    body: B,
    _call: Option<Call>,
}

impl<B: HttpBody + Unpin> HttpBody for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Gate, Limits, ListenerStats, Peer};
    use super::*;
    use tower::{Layer, Service};

    #[tokio::test]
    async fn a_call_is_open_until_its_body_is_dropped() {
        let stats = Arc::new(ListenerStats::default());
        let gate = Gate::tls(&Limits::default(), stats.clone());
        let slot = gate.admit(Peer::Uid(5)).unwrap();
        let conn = slot.conn.clone();
        let mut svc =
            CallsLayer::<u32>::new().layer(tower::service_fn(|req: Request<()>| async move {
                // The service sees the transport's info and the connection.
                assert_eq!(req.extensions().get::<u32>(), Some(&7));
                req.extensions()
                    .get::<Connection>()
                    .unwrap()
                    .authenticated();
                Ok::<_, std::convert::Infallible>(Response::new(String::from("body")))
            }));
        let mut req = Request::new(());
        req.extensions_mut().insert(Info::new(7u32, conn.clone()));
        let response = svc.call(req).await.unwrap();
        assert!(conn.idle_since().is_none(), "the call is open");
        assert!(conn.is_authenticated());
        assert_eq!(
            stats
                .unauthenticated
                .load(std::sync::atomic::Ordering::Relaxed),
            0
        );
        drop(response);
        assert!(conn.idle_since().is_some(), "the call ended");
        // A cancelled call ends too.
        let mut req = Request::new(());
        req.extensions_mut().insert(Info::new(7u32, conn.clone()));
        drop(svc.call(req));
        assert!(conn.idle_since().is_some());
    }
}
