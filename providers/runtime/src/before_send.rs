//! A management-cluster client with a hook that sees each request before it goes out and may hold it
//! back: what the write counters and the client-side rate limit are built on.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use kube::client::Body;

/// A client that behaves like `client` and calls `hook` on every request before sending it; the
/// request waits for the duration the hook returns.
pub fn before_send<F>(client: &kube::Client, hook: F) -> kube::Client
where
    F: Fn(&Request<Body>) -> Duration + Send + Sync + 'static,
{
    let hooked = Hooked {
        client: client.clone(),
        hook: Arc::new(hook),
    };
    kube::Client::new(hooked, client.default_namespace()).with_valid_until(*client.valid_until())
}

struct Hooked<F> {
    client: kube::Client,
    hook: Arc<F>,
}

type Sent = Pin<Box<dyn Future<Output = Result<Response<Body>, kube::Error>> + Send>>;

impl<F> tower_service::Service<Request<Body>> for Hooked<F>
where
    F: Fn(&Request<Body>) -> Duration + Send + Sync + 'static,
{
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = Sent;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Sent {
        let wait = (self.hook)(&request);
        let client = self.client.clone();
        Box::pin(async move {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            client.send(request).await
        })
    }
}
