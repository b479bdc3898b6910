//! A list-then-watch of one kind on a workload cluster that keeps nothing between events but the
//! resource version it resumes from. The workload watches only need to know that an object changed, and
//! there is one pair of them per cluster: kube-runtime's watchers hold their request futures inline (a
//! cluster's pair took 28 KiB for as long as they ran) and each a line buffer of at least 8 KiB that
//! grows to the largest event and stays; here a request is boxed only while it runs and each event is
//! read into a buffer of its own, dropped once it is digested.

use std::pin::Pin;
use std::time::Duration;

use futures::{AsyncBufRead, AsyncBufReadExt, Stream, StreamExt};
use kube::ResourceExt;
use kube::api::{ListParams, ObjectList, WatchEvent, WatchParams};

use super::workload_watches::Seen;

/// The server ends each watch after this long, and the watch resumes: the API server's own shortest
/// for a watch that names none (`--min-request-timeout`). At rest a watch then costs a request every
/// half hour rather than every five minutes (kube-runtime's 290 s).
const WATCH_TIMEOUT_SECONDS: u32 = 1800;
/// Wait before a failed request is tried again: from half a second, doubling to 5 s.
const FIRST_RETRY: Duration = Duration::from_millis(500);
const LAST_RETRY: Duration = Duration::from_secs(5);

/// What a watch does next.
enum Phase {
    List,
    /// Start a watch from this resource version.
    Watch(String),
    /// Read the next event of a running watch; the version is that of the last event read.
    Read(String, Pin<Box<dyn AsyncBufRead + Send>>),
    /// Wait, then resume from the version if there is one, else list.
    Retry(Option<String>),
}

/// One kind's watch: `url` is the collection (e.g. `/api/v1/nodes`), `selector` a label selector, and
/// `digest` what the controller reads of an object.
pub(super) struct SlimWatch<K> {
    target: Target<K>,
    phase: Phase,
    retry_in: Duration,
}

/// What a watch asks for.
struct Target<K> {
    client: kube::Client,
    url: String,
    selector: &'static str,
    kind: &'static str,
    digest: fn(&K) -> u64,
    watch_timeout: u32,
}

/// What one event line means for the watch.
#[derive(Debug, PartialEq)]
enum Read {
    Seen(Seen, String),
    /// A bookmark: nothing changed up to this version.
    Version(String),
    /// The version is too old to resume from (410 Gone): list again, at once.
    Expired,
}

impl<K> SlimWatch<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + Send + 'static,
{
    pub(super) fn new(
        client: kube::Client,
        url: &str,
        selector: &'static str,
        kind: &'static str,
        digest: fn(&K) -> u64,
    ) -> Self {
        Self {
            target: Target {
                client,
                url: url.to_owned(),
                selector,
                kind,
                digest,
                watch_timeout: WATCH_TIMEOUT_SECONDS,
            },
            phase: Phase::List,
            retry_in: FIRST_RETRY,
        }
    }

    /// The watch's events: each (re)list as [`Seen::Listing`], the objects, [`Seen::Listed`]; then each
    /// change. A failed request is an error item, retried after a pause; the stream never ends.
    pub(super) fn events(self) -> impl Stream<Item = Result<Seen, kube::Error>> + Send {
        futures::stream::unfold(self, |mut watch| async move {
            let batch = watch.step().await;
            Some((futures::stream::iter(batch), watch))
        })
        .flatten()
    }

    async fn step(&mut self) -> Vec<Result<Seen, kube::Error>> {
        match std::mem::replace(&mut self.phase, Phase::List) {
            Phase::List => match Box::pin(self.target.list()).await {
                Ok((version, seen)) => {
                    self.retry_in = FIRST_RETRY;
                    self.phase = Phase::Watch(version);
                    std::iter::once(Seen::Listing(self.target.kind))
                        .chain(seen)
                        .chain([Seen::Listed(self.target.kind)])
                        .map(Ok)
                        .collect()
                }
                Err(e) => self.failed(None, e),
            },
            Phase::Watch(version) => match Box::pin(self.target.watch(&version)).await {
                Ok(lines) => {
                    self.phase = Phase::Read(version, Box::pin(lines));
                    Vec::new()
                }
                Err(e) => self.failed(Some(version), e),
            },
            Phase::Read(version, mut lines) => {
                let mut line = Vec::new();
                match lines.read_until(b'\n', &mut line).await {
                    // The server ended the watch (its timeout): resume.
                    Ok(0) => {
                        self.phase = Phase::Watch(version);
                        Vec::new()
                    }
                    Ok(_) => match read(&line, self.target.kind, self.target.digest) {
                        Ok(Read::Seen(seen, version)) => {
                            self.retry_in = FIRST_RETRY;
                            self.phase = Phase::Read(version, lines);
                            vec![Ok(seen)]
                        }
                        Ok(Read::Version(version)) => {
                            self.phase = Phase::Read(version, lines);
                            Vec::new()
                        }
                        Ok(Read::Expired) => {
                            tracing::debug!(
                                kind = self.target.kind,
                                "watch expired (410); listing again"
                            );
                            Vec::new()
                        }
                        Err(e) => self.failed(Some(version), e),
                    },
                    Err(e) => self.failed(Some(version), kube::Error::ReadEvents(e)),
                }
            }
            Phase::Retry(version) => {
                Box::pin(tokio::time::sleep(self.retry_in)).await;
                self.retry_in = (self.retry_in * 2).min(LAST_RETRY);
                self.phase = version.map_or(Phase::List, Phase::Watch);
                Vec::new()
            }
        }
    }

    fn failed(
        &mut self,
        version: Option<String>,
        error: kube::Error,
    ) -> Vec<Result<Seen, kube::Error>> {
        self.phase = Phase::Retry(version);
        vec![Err(error)]
    }
}

impl<K> Target<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + Send + 'static,
{
    /// The objects now, from the API server's cache, and the version to watch from.
    async fn list(&self) -> Result<(String, Vec<Seen>), kube::Error> {
        let params = ListParams::default().labels(self.selector).match_any();
        let request = kube::core::Request::new(&self.url)
            .list(&params)
            .map_err(kube::Error::BuildRequest)?;
        let list: ObjectList<K> = self.client.request(request).await?;
        let seen = list
            .items
            .iter()
            .map(|object| Seen::Present(name(self.kind, object), (self.digest)(object)))
            .collect();
        Ok((list.metadata.resource_version.unwrap_or_default(), seen))
    }

    async fn watch(&self, version: &str) -> Result<impl AsyncBufRead + Send + use<K>, kube::Error> {
        // No bookmarks: the API server sends one a minute on every watch that asks, which was most
        // of what a settled cluster's connection carried. Without them a watch resumes from the
        // version of its last change, and when that is too old (410) it lists again, which wakes the
        // control plane only if something changed.
        let params = WatchParams::default()
            .labels(self.selector)
            .timeout(self.watch_timeout)
            .disable_bookmarks();
        let request = kube::core::Request::new(&self.url)
            .watch(&params, version)
            .map_err(kube::Error::BuildRequest)?;
        self.client.request_stream(request).await
    }
}

fn name<K: kube::Resource>(kind: &str, object: &K) -> String {
    format!("{kind}/{}", object.name_any())
}

/// One line of a watch response.
fn read<K>(line: &[u8], kind: &str, digest: fn(&K) -> u64) -> Result<Read, kube::Error>
where
    K: kube::Resource + serde::de::DeserializeOwned,
{
    let version = |object: &K| object.resource_version().unwrap_or_default();
    Ok(
        match serde_json::from_slice(line).map_err(kube::Error::SerdeError)? {
            WatchEvent::Added(object) | WatchEvent::Modified(object) => Read::Seen(
                Seen::Present(name(kind, &object), digest(&object)),
                version(&object),
            ),
            WatchEvent::Deleted(object) => {
                Read::Seen(Seen::Gone(name(kind, &object)), version(&object))
            }
            WatchEvent::Bookmark(bookmark) => Read::Version(bookmark.metadata.resource_version),
            WatchEvent::Error(status) if status.code == 410 => Read::Expired,
            WatchEvent::Error(status) => return Err(kube::Error::Api(status)),
        },
    )
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Node;
    use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
    use serde_json::json;

    use super::*;

    const ROLE: &str = "node-role.kubernetes.io/control-plane";

    fn labels_digest(node: &Node) -> u64 {
        node.labels().len() as u64
    }

    fn read_line(line: &str) -> Result<Read, kube::Error> {
        read(line.as_bytes(), "node", labels_digest)
    }

    #[test]
    fn each_event_line_is_a_change_a_version_or_the_end_of_the_watch() {
        let node = r#"{"kind":"Node","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"7","labels":{"x":"y"}}}"#;
        assert_eq!(
            read_line(&format!(r#"{{"type":"ADDED","object":{node}}}"#)).unwrap(),
            Read::Seen(Seen::Present("node/a".into(), 1), "7".into())
        );
        assert_eq!(
            read_line(&format!(r#"{{"type":"MODIFIED","object":{node}}}"#)).unwrap(),
            Read::Seen(Seen::Present("node/a".into(), 1), "7".into())
        );
        assert_eq!(
            read_line(&format!(r#"{{"type":"DELETED","object":{node}}}"#)).unwrap(),
            Read::Seen(Seen::Gone("node/a".into()), "7".into())
        );
        assert_eq!(
            read_line(
                r#"{"type":"BOOKMARK","object":{"kind":"Node","apiVersion":"v1","metadata":{"resourceVersion":"12"}}}"#
            )
            .unwrap(),
            Read::Version("12".into())
        );
        let status = |code: u16| {
            format!(
                r#"{{"type":"ERROR","object":{{"kind":"Status","apiVersion":"v1","status":"Failure","message":"m","reason":"r","code":{code}}}}}"#
            )
        };
        assert_eq!(read_line(&status(410)).unwrap(), Read::Expired);
        assert!(matches!(
            read_line(&status(500)),
            Err(kube::Error::Api(status)) if status.code == 500
        ));
        assert!(matches!(
            read_line("{\"type\":"),
            Err(kube::Error::SerdeError(_))
        ));
    }

    /// Against a real API server: the list, then changes of selected objects only, across the ends of
    /// watches the server closes every second.
    #[tokio::test]
    async fn lists_then_reports_each_change_of_what_it_selects() {
        let plane = testenv::ManagementPlane::start()
            .await
            .expect("management plane");
        let client = plane.client().await.unwrap();
        let nodes = Api::<Node>::all(client.clone());
        let node = |name: &str, labels: serde_json::Value| {
            serde_json::from_value::<Node>(json!({"metadata": {"name": name, "labels": labels}}))
                .unwrap()
        };
        let create = |object: Node| {
            let nodes = nodes.clone();
            async move { nodes.create(&PostParams::default(), &object).await.unwrap() }
        };
        create(node("a", json!({ROLE: ""}))).await;
        create(node("worker", json!({}))).await;

        let mut watch = SlimWatch::new(client, nodes.resource_url(), ROLE, "node", labels_digest);
        watch.target.watch_timeout = 1;
        let mut events = Box::pin(watch.events());
        let mut next = async || {
            tokio::time::timeout(Duration::from_secs(20), events.next())
                .await
                .expect("an event within 20 s")
                .expect("the stream goes on")
                .expect("no error")
        };
        assert_eq!(next().await, Seen::Listing("node"));
        assert_eq!(next().await, Seen::Present("node/a".into(), 1));
        assert_eq!(next().await, Seen::Listed("node"));

        tokio::time::sleep(Duration::from_millis(2500)).await;
        create(node("worker-2", json!({}))).await;
        create(node("b", json!({ROLE: ""}))).await;
        assert_eq!(next().await, Seen::Present("node/b".into(), 1));
        let labels = json!({"metadata": {"labels": {"zone": "z1"}}});
        nodes
            .patch("a", &PatchParams::default(), &Patch::Merge(&labels))
            .await
            .unwrap();
        assert_eq!(next().await, Seen::Present("node/a".into(), 2));
        nodes.delete("b", &DeleteParams::default()).await.unwrap();
        assert_eq!(next().await, Seen::Gone("node/b".into()));
    }
}
