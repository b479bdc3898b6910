//! Kubernetes Events, as both managers publish them: notes cut to the API server's 1 kB limit, and a lost
//! Event never fails or repeats a reconcile (Events are for people).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Reporter};
use kubeadm_api::events::{EventReason, Severity};
use kubeadm_api::rbac::Rule;

/// What [`publish`] needs: kube-runtime's recorder writes with the events.k8s.io API, creating an Event
/// and patching it when it repeats.
pub const RBAC_RULE: Rule = Rule {
    groups: &["events.k8s.io"],
    resources: &["events"],
    verbs: &["create", "patch"],
};

/// The API server refuses an Event whose note is longer.
pub const NOTE_LIMIT: usize = 1024;

/// kube-runtime's recorder keeps each Event it published, to count its repeats into a series, until
/// its first publish after six minutes; one quiet for longer than this is replaced by a fresh one.
const REMEMBERED_FOR: Duration = Duration::from_secs(7 * 60);
/// How often [`Recorder::forget_when_quiet`] looks.
const QUIET_CHECK_EVERY: Duration = Duration::from_secs(60);

/// A manager's Event recorder: kube-runtime's, started afresh once it has been quiet for longer than it
/// remembers Events. At rest no publish comes to drop what the last busy minutes left (about 9 KiB
/// per cluster created, with the map's capacity), and a fresh recorder counts repeats exactly as the
/// old one would have: every Event it remembered had expired.
pub struct Recorder {
    client: kube::Client,
    reporter: Reporter,
    current: Mutex<Current>,
}

struct Current {
    recorder: kube::runtime::events::Recorder,
    /// When the last publish began; `None` while nothing was published to this recorder.
    last: Option<Instant>,
}

impl Recorder {
    pub fn new(client: kube::Client, reporter: Reporter) -> Self {
        let recorder = kube::runtime::events::Recorder::new(client.clone(), reporter.clone());
        Self {
            client,
            reporter,
            current: Mutex::new(Current {
                recorder,
                last: None,
            }),
        }
    }

    fn current(&self) -> std::sync::MutexGuard<'_, Current> {
        self.current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The recorder to publish with now.
    fn publishing(&self) -> kube::runtime::events::Recorder {
        let mut current = self.current();
        current.last = Some(Instant::now());
        current.recorder.clone()
    }

    /// Replaces the recorder with a fresh one when something was published to it and nothing since
    /// [`REMEMBERED_FOR`] before `now`; true when it did.
    pub fn forget_if_quiet(&self, now: Instant) -> bool {
        let mut current = self.current();
        let quiet = current
            .last
            .is_some_and(|last| now.saturating_duration_since(last) > REMEMBERED_FOR);
        if quiet {
            *current = Current {
                recorder: kube::runtime::events::Recorder::new(
                    self.client.clone(),
                    self.reporter.clone(),
                ),
                last: None,
            };
        }
        quiet
    }

    /// Forgets what a quiet recorder remembers, looking every minute; runs until dropped.
    pub async fn forget_when_quiet(&self) {
        let mut every = tokio::time::interval(QUIET_CHECK_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            if self.forget_if_quiet(Instant::now()) {
                tracing::trace!("quiet event recorder started afresh");
            }
        }
    }
}

/// Publishes `event` about `regarding`, its note cut to [`NOTE_LIMIT`]; a failure is logged, not returned.
pub async fn publish(recorder: &Recorder, regarding: &ObjectReference, mut event: Event) {
    event.note = event.note.map(|note| truncate(note, NOTE_LIMIT));
    if let Err(e) = recorder.publishing().publish(&event, regarding).await {
        tracing::warn!(
            object = regarding.name.as_deref().unwrap_or_default(),
            reason = %event.reason,
            error = %e,
            "cannot record event"
        );
    }
}

/// The Event `reason` names, published with `action` (one of the reason's) and `note`, about `secondary`
/// when given.
pub fn event(
    reason: &EventReason,
    action: &str,
    note: String,
    secondary: Option<ObjectReference>,
) -> Event {
    debug_assert!(
        reason.actions.contains(&action),
        "{action} is not an action of {}",
        reason.reason
    );
    Event {
        type_: match reason.severity {
            Severity::Normal => EventType::Normal,
            Severity::Warning => EventType::Warning,
        },
        reason: reason.reason.into(),
        note: Some(note),
        action: action.into(),
        secondary,
    }
}

/// `text` cut to at most `limit` bytes on a character boundary, ending in `…` when cut.
pub fn truncate(mut text: String, limit: usize) -> String {
    if text.len() > limit {
        let mut end = limit - '…'.len_utf8();
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_notes_are_cut_on_a_character_boundary() {
        let note = "ä".repeat(NOTE_LIMIT);
        let cut = truncate(note, NOTE_LIMIT);
        assert!(cut.len() <= NOTE_LIMIT, "{}", cut.len());
        assert!(cut.ends_with('…'));
        assert_eq!(truncate("short".into(), NOTE_LIMIT), "short");
    }

    #[tokio::test]
    async fn only_a_recorder_quiet_since_it_published_starts_afresh() {
        let config = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
        let recorder = Recorder::new(
            kube::Client::try_from(config).unwrap(),
            Reporter::from("test"),
        );
        let later = |by: Duration| Instant::now() + by;
        assert!(
            !recorder.forget_if_quiet(later(REMEMBERED_FOR * 2)),
            "nothing published: nothing to forget"
        );
        recorder.publishing();
        assert!(!recorder.forget_if_quiet(later(REMEMBERED_FOR / 2)));
        assert!(recorder.forget_if_quiet(later(REMEMBERED_FOR * 2)));
        assert!(
            !recorder.forget_if_quiet(later(REMEMBERED_FOR * 3)),
            "the fresh recorder remembers nothing"
        );
    }
}
