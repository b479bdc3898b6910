//! What an Event the providers publish is: its reason with its type, the actions it is published with
//! and when. Each provider names its Events once (`controlplane::events`, `bootstrap::events`); the
//! managers publish from these and the reference page is generated from them.

/// The type of an Event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    Normal,
    Warning,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Normal => "Normal",
            Severity::Warning => "Warning",
        }
    }
}

/// An Event reason and everything that goes with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventReason {
    pub reason: &'static str,
    pub severity: Severity,
    /// The actions it is published with: the first unless the publisher names another of them.
    pub actions: &'static [&'static str],
    /// When it is published, for the reference.
    pub when: &'static str,
}

impl EventReason {
    /// The action it is published with by default.
    pub fn action(&self) -> &'static str {
        self.actions[0]
    }
}
