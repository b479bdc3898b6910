//! What a rollout may delete. Cluster API's own end-to-end tests assert that one change replaces each
//! old Machine once and never a Machine the rollout itself created; every scenario that waits on a
//! rollout or a remediation feeds what it sees to a [`Replacements`] and checks the same at the end.

use std::collections::BTreeSet;

/// Every Machine name seen while a rollout ran.
#[derive(Debug, Default)]
pub struct Replacements {
    seen: BTreeSet<String>,
}

impl Replacements {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records the Machines present now.
    pub fn saw<S: AsRef<str>>(&mut self, names: impl IntoIterator<Item = S>) {
        self.seen
            .extend(names.into_iter().map(|n| n.as_ref().to_owned()));
    }

    /// Every Machine seen so far (the old ones included, once they were seen).
    pub fn seen(&self) -> &BTreeSet<String> {
        &self.seen
    }

    /// The Machines seen that are gone from `now` although `may_go` does not allow it: a Machine the
    /// rollout created and then deleted again, that is one replaced twice for one change.
    fn wrongly_gone<S: AsRef<str>>(
        &self,
        now: impl IntoIterator<Item = S>,
        may_go: impl Fn(&str) -> bool,
    ) -> Vec<String> {
        let now: BTreeSet<String> = now.into_iter().map(|n| n.as_ref().to_owned()).collect();
        self.seen
            .iter()
            .filter(|n| !now.contains(*n) && !may_go(n))
            .cloned()
            .collect()
    }

    /// Says which Machines went, naming `what`, unless every Machine seen is in `now` or may go.
    pub fn check(
        &self,
        what: &str,
        now: &[String],
        may_go: impl Fn(&str) -> bool,
    ) -> Result<(), String> {
        let gone = self.wrongly_gone(now, may_go);
        if gone.is_empty() {
            return Ok(());
        }
        Err(format!(
            "{what}: {gone:?} deleted although the change did not replace them (a Machine replaced \
             twice?); now {now:?}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_machine_created_and_deleted_again_is_wrongly_gone() {
        let mut r = Replacements::new();
        r.saw(["old-a", "old-b"]);
        r.saw(["old-b", "new-a"]);
        r.saw(["old-b", "new-b"]);
        r.saw(["new-b", "new-c"]);
        let old = ["old-a", "old-b"];
        assert_eq!(
            r.wrongly_gone(["new-b", "new-c"], |n| old.contains(&n)),
            vec!["new-a".to_owned()]
        );
    }

    #[test]
    fn replacing_only_the_old_machines_is_fine() {
        let mut r = Replacements::new();
        r.saw(["old-a", "old-b"]);
        r.saw(["old-b", "new-a"]);
        r.saw(["new-a", "new-b"]);
        let now = ["new-a".to_owned(), "new-b".to_owned()];
        assert_eq!(r.check("roll", &now, |n| n.starts_with("old-")), Ok(()));
        let err = r.check("roll", &now, |n| n == "old-a").unwrap_err();
        assert!(err.contains("[\"old-b\"]"), "{err}");
        assert_eq!(r.seen().len(), 4);
    }
}
