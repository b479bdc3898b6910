//! Work on a cluster's etcd that outlasts a reconcile: a snapshot of a 1 GiB database takes seconds to
//! minutes to stream into object storage, and a reconcile that waited for it would hold that control
//! plane's every other step (and a worker) meanwhile. A reconcile starts it on a task of its own, one per
//! cluster at a time; later reconciles see it running; its end wakes the control plane, whose next
//! reconcile takes the outcome (once) and records it.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::channel::mpsc;
use futures::{FutureExt, Stream};
use kube::runtime::reflector::ObjectRef;
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;

use super::ClusterKey;

/// One task per cluster at most, and the channel their ends wake control planes on.
pub(in crate::controller) struct Background<T> {
    jobs: Arc<Mutex<HashMap<ClusterKey, Job<T>>>>,
    wake: mpsc::UnboundedSender<ObjectRef<KubeadmControlPlane>>,
}

enum Job<T> {
    /// Its id tells this task from a later one of the same cluster when it ends.
    Running(u64, tokio::task::AbortHandle),
    Done(T),
}

/// How a cluster's background work stands.
#[derive(Debug, PartialEq, Eq)]
pub(in crate::controller) enum State<T> {
    Idle,
    Running,
    /// Finished with this outcome, handed over now and forgotten here.
    Done(T),
}

static IDS: AtomicU64 = AtomicU64::new(1);

type Jobs<T> = HashMap<ClusterKey, Job<T>>;

fn lock<T>(jobs: &Mutex<Jobs<T>>) -> MutexGuard<'_, Jobs<T>> {
    jobs.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<T: Send + 'static> Background<T> {
    /// Nothing running yet, and the stream of control planes whose work finished.
    pub(in crate::controller) fn new() -> (Self, impl Stream<Item = ObjectRef<KubeadmControlPlane>>)
    {
        let (wake, woken) = mpsc::unbounded();
        let jobs = Arc::default();
        (Self { jobs, wake }, woken)
    }

    /// How the work of `key` stands; a finished outcome is handed over once.
    pub(in crate::controller) fn take(&self, key: &ClusterKey) -> State<T> {
        let mut jobs = lock(&self.jobs);
        match jobs.remove(key) {
            None => State::Idle,
            Some(Job::Done(outcome)) => State::Done(outcome),
            Some(running @ Job::Running(..)) => {
                jobs.insert(key.clone(), running);
                State::Running
            }
        }
    }

    /// Starts `work` for `key` unless something of `key` is running or its outcome not yet taken
    /// (`false` then, and `work` is dropped unstarted); its end wakes `control_plane`.
    pub(in crate::controller) fn start<F>(
        &self,
        key: &ClusterKey,
        control_plane: ObjectRef<KubeadmControlPlane>,
        work: F,
    ) -> bool
    where
        F: Future<Output = T> + Send + 'static,
    {
        // Held while spawning, so that the task's end (which takes it too) comes after its start.
        let mut jobs = lock(&self.jobs);
        if jobs.contains_key(key) {
            return false;
        }
        let id = IDS.fetch_add(1, Ordering::Relaxed);
        let (all, wake, finished) = (Arc::clone(&self.jobs), self.wake.clone(), key.clone());
        let task = tokio::spawn(async move {
            let outcome = std::panic::AssertUnwindSafe(work).catch_unwind().await;
            let mut jobs = lock(&all);
            // Forgotten meanwhile (the control plane went): the outcome has no one to go to.
            if matches!(jobs.get(&finished), Some(Job::Running(running, _)) if *running == id) {
                match outcome {
                    Ok(outcome) => {
                        jobs.insert(finished, Job::Done(outcome));
                    }
                    // A bug, not an outcome: the cluster is free again, and the next reconcile
                    // starts the work anew instead of finding it running for ever.
                    Err(panic) => {
                        jobs.remove(&finished);
                        let (namespace, cluster) = &finished;
                        tracing::error!(
                            %namespace, %cluster, panic = %panic_message(&*panic),
                            "background work on the cluster's etcd panicked"
                        );
                    }
                }
                drop(jobs);
                let _ = wake.unbounded_send(control_plane);
            }
        });
        jobs.insert(key.clone(), Job::Running(id, task.abort_handle()));
        true
    }

    /// Stops the work of `key`, if any, and forgets its outcome.
    pub(in crate::controller) fn forget(&self, key: &ClusterKey) {
        if let Some(Job::Running(_, task)) = lock(&self.jobs).remove(key) {
            task.abort();
        }
    }
}

/// What a panic said, when it said it as text.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(not text)")
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use kube::runtime::reflector::ObjectRef;
    use tokio::sync::oneshot;

    use super::{Background, State};

    fn key(cluster: &str) -> (String, String) {
        ("default".into(), cluster.into())
    }

    #[tokio::test]
    async fn work_runs_beside_the_reconcile_and_its_end_wakes_the_control_plane_once() {
        let (background, mut woken) = Background::<u32>::new();
        let (finish, finished) = oneshot::channel::<u32>();
        let kcp = ObjectRef::new("prod-control-plane").within("default");
        assert!(background.start(
            &key("prod"),
            kcp.clone(),
            async move { finished.await.unwrap() }
        ));
        // Started, not finished: a second start is refused, and another cluster is not held up.
        assert_eq!(background.take(&key("prod")), State::Running);
        assert!(!background.start(&key("prod"), kcp.clone(), async { 0 }));
        assert_eq!(background.take(&key("staging")), State::Idle);
        finish.send(7).unwrap();
        assert_eq!(woken.next().await, Some(kcp.clone()));
        // The outcome is handed over once; then the cluster is free for the next.
        assert_eq!(background.take(&key("prod")), State::Done(7));
        assert_eq!(background.take(&key("prod")), State::Idle);
        assert!(background.start(&key("prod"), kcp.clone(), async { 8 }));
        assert_eq!(woken.next().await, Some(kcp));
        assert_eq!(background.take(&key("prod")), State::Done(8));
    }

    #[tokio::test]
    async fn work_that_panics_frees_the_cluster_and_wakes_the_control_plane() {
        let (background, mut woken) = Background::<u32>::new();
        let kcp = ObjectRef::new("prod-control-plane").within("default");
        assert!(background.start(&key("prod"), kcp.clone(), async {
            panic!("a bug in the upload")
        }));
        assert_eq!(woken.next().await, Some(kcp.clone()));
        // Not running for ever: the next reconcile may start it again.
        assert_eq!(background.take(&key("prod")), State::Idle);
        assert!(background.start(&key("prod"), kcp, async { 9 }));
        woken.next().await;
        assert_eq!(background.take(&key("prod")), State::Done(9));
    }

    #[tokio::test]
    async fn forgotten_work_is_stopped_and_wakes_no_one() {
        let (background, mut woken) = Background::<u32>::new();
        let (finish, finished) = oneshot::channel::<u32>();
        let (dropped, gone) = oneshot::channel::<()>();
        let kcp = ObjectRef::new("prod-control-plane").within("default");
        assert!(background.start(&key("prod"), kcp, async move {
            let _stopped = dropped;
            finished.await.unwrap_or(0)
        }));
        background.forget(&key("prod"));
        // The task was aborted: what it held is dropped, and the finishing side has no one to send to.
        assert!(gone.await.is_err());
        assert!(finish.send(7).is_err());
        assert_eq!(background.take(&key("prod")), State::Idle);
        drop(background);
        assert_eq!(woken.next().await, None);
    }
}
