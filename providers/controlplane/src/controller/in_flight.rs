//! How soon a control plane with a change under way is looked at again. The events that end most waits
//! reach the reconcile through watches (a Machine's nodeRef and conditions, its deletion, the Cluster);
//! the workload cluster's static pods and the etcd member list raise none, so while a change is in
//! flight the control plane is polled: every [`FAST`] for [`FAST_FOR`] after its last step, then every
//! [`SLOW`] until [`SLOW_FOR`], then every [`WAIT`](super::WAIT). A step whose effect is in place when
//! it returns (etcd has applied a membership change) is followed by the next look at once. A settled
//! control plane is not polled here at all.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use kube::runtime::reflector::ObjectRef;
use kubeadm_api::controlplane::v1beta2::KubeadmControlPlane;

use super::WAIT;

/// The poll interval right after a step: a joining machine or a learner catching up is noticed within
/// this of being ready.
pub(super) const FAST: Duration = Duration::from_millis(500);
/// How long after a step the control plane is polled every [`FAST`]: longer than a join on machines
/// that boot quickly.
pub(super) const FAST_FOR: Duration = Duration::from_secs(30);
/// The poll interval after that, while a slower machine boots.
pub(super) const SLOW: Duration = Duration::from_secs(2);
pub(super) const SLOW_FOR: Duration = Duration::from_secs(120);
/// Immediate looks in a row after steps that ask for one ([`InFlight::again`]); then the next waits
/// [`FAST`], so that a step that changes nothing cannot spin.
const AGAIN_IN_A_ROW: u8 = 3;
/// Entries of control planes not seen for this long are dropped (the control plane was deleted).
const FORGET_AFTER: Duration = Duration::from_secs(3600);

/// The poll interval of a control plane whose last step was `since` ago.
pub(super) fn interval(since: Duration) -> Duration {
    if since < FAST_FOR {
        FAST
    } else if since < SLOW_FOR {
        SLOW
    } else {
        WAIT
    }
}

/// What is known of a control plane with a change in flight.
struct Entry {
    /// When it took its last step.
    step: Instant,
    /// When it was last looked at.
    seen: Instant,
    /// Immediate looks given in a row.
    again: u8,
}

/// When each control plane with a change in flight took its last step.
#[derive(Default)]
pub(super) struct InFlight {
    steps: Mutex<HashMap<ObjectRef<KubeadmControlPlane>, Entry>>,
}

impl InFlight {
    /// The poll interval of `key`, which has a change in flight; `stepped` when this reconcile took a step.
    pub(super) fn poll(&self, key: ObjectRef<KubeadmControlPlane>, stepped: bool) -> Duration {
        self.look(key, |entry, now| {
            if stepped {
                entry.step = now;
            }
            entry.again = 0;
            interval(now.saturating_duration_since(entry.step))
        })
    }

    /// `key` took a step whose effect is already in place and that no watch announces: it is looked
    /// at again at once, up to [`AGAIN_IN_A_ROW`] times in a row, then polled as after any step.
    pub(super) fn again(&self, key: ObjectRef<KubeadmControlPlane>) -> Duration {
        self.look(key, |entry, now| {
            entry.step = now;
            if entry.again < AGAIN_IN_A_ROW {
                entry.again += 1;
                Duration::ZERO
            } else {
                entry.again = 0;
                FAST
            }
        })
    }

    fn look(
        &self,
        key: ObjectRef<KubeadmControlPlane>,
        decide: impl FnOnce(&mut Entry, Instant) -> Duration,
    ) -> Duration {
        let now = Instant::now();
        let mut steps = self.steps.lock().unwrap_or_else(PoisonError::into_inner);
        steps.retain(|_, entry| now.saturating_duration_since(entry.seen) < FORGET_AFTER);
        let entry = steps.entry(key).or_insert(Entry {
            step: now,
            seen: now,
            again: 0,
        });
        entry.seen = now;
        decide(entry, now)
    }

    /// `key` is settled: nothing is in flight.
    pub(super) fn settled(&self, key: &ObjectRef<KubeadmControlPlane>) {
        self.steps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_fast_after_a_step_then_slower_then_at_the_wait() {
        assert_eq!(interval(Duration::ZERO), FAST);
        assert_eq!(interval(FAST_FOR - Duration::from_millis(1)), FAST);
        assert_eq!(interval(FAST_FOR), SLOW);
        assert_eq!(interval(SLOW_FOR), WAIT);
        assert!(
            FAST <= Duration::from_secs(1),
            "a ready machine waits at most 1 s"
        );
    }

    #[test]
    fn a_step_restarts_the_fast_polling_and_settling_forgets() {
        let in_flight = InFlight::default();
        let key = ObjectRef::new("kcp").within("ns");
        assert_eq!(in_flight.poll(key.clone(), false), FAST);
        // An old step: the control plane has been waiting for a long time.
        let long_ago = Instant::now() - SLOW_FOR;
        in_flight.steps.lock().unwrap().get_mut(&key).unwrap().step = long_ago;
        assert_eq!(in_flight.poll(key.clone(), false), WAIT);
        assert_eq!(in_flight.poll(key.clone(), true), FAST);
        in_flight.settled(&key);
        assert!(in_flight.steps.lock().unwrap().is_empty());
    }

    #[test]
    fn a_step_in_place_is_followed_at_once_but_never_in_a_loop() {
        let in_flight = InFlight::default();
        let key = ObjectRef::new("kcp").within("ns");
        for _ in 0..AGAIN_IN_A_ROW {
            assert_eq!(in_flight.again(key.clone()), Duration::ZERO);
        }
        assert_eq!(in_flight.again(key.clone()), FAST, "the limit in a row");
        assert_eq!(in_flight.again(key.clone()), Duration::ZERO);
        // Any other look ends the row.
        assert_eq!(in_flight.again(key.clone()), Duration::ZERO);
        assert_eq!(in_flight.poll(key.clone(), false), FAST);
        for _ in 0..AGAIN_IN_A_ROW {
            assert_eq!(in_flight.again(key.clone()), Duration::ZERO);
        }
        // An immediate look is a step: the fast polling starts over from it.
        let long_ago = Instant::now() - SLOW_FOR;
        in_flight.steps.lock().unwrap().get_mut(&key).unwrap().step = long_ago;
        in_flight.again(key.clone());
        assert_eq!(in_flight.poll(key.clone(), false), FAST);
    }
}
