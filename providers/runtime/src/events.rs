//! Kubernetes Events, as both managers publish them: notes cut to the API server's 1 kB limit, and a lost
//! Event never fails or repeats a reconcile (Events are for people).

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
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

/// Publishes `event` about `regarding`, its note cut to [`NOTE_LIMIT`]; a failure is logged, not returned.
pub async fn publish(recorder: &Recorder, regarding: &ObjectReference, mut event: Event) {
    event.note = event.note.map(|note| truncate(note, NOTE_LIMIT));
    if let Err(e) = recorder.publish(&event, regarding).await {
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
}
