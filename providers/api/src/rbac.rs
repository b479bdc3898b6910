//! RBAC rules as plain data. Each manager declares the rules its calls need next to those calls
//! (`controller::RULES` of each provider), and the manifest generator (`xtask`) writes them into the
//! manager's ClusterRole.

/// One RBAC rule as a table row: API groups, resources, verbs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    pub groups: &'static [&'static str],
    pub resources: &'static [&'static str],
    pub verbs: &'static [&'static str],
}
