//! Faults a simulated machine can be told to have, by annotation on its Machine or SimMachine (a
//! SimMachineTemplate passes its `spec.template.metadata.annotations` on), or once, for the next
//! control-plane join of a cluster, by annotation on the SimCluster (the simulator removes it when used).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Which fault, e.g. `etcd-never-starts`.
pub const FAULT_ANNOTATION: &str = "sim.cluster.x-k8s.io/fault";
/// Seconds for `etcd-slow-start` (delay before etcd starts), `lost-after-join` (time until the node
/// goes) and `partition-mid-join` (time the node is cut off); defaults 20, 10 and 20.
pub const FAULT_DELAY_ANNOTATION: &str = "sim.cluster.x-k8s.io/fault-delay-seconds";
/// On a SimCluster: a fault for the next control-plane join only.
pub const NEXT_JOIN_FAULT_ANNOTATION: &str = "sim.cluster.x-k8s.io/next-join-fault";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The join adds its etcd member as a learner, then etcd never starts (the join hangs and fails).
    EtcdNeverStarts,
    /// etcd starts only after a delay.
    EtcdSlowStart(Duration),
    /// The node crashes right after its etcd member was added, before it started anything.
    CrashMidJoin,
    /// The node joins, then disappears (every process stops) after a delay.
    LostAfterJoin(Duration),
    /// Once its etcd learner has started and answers, the node's network is cut for a while (a network partition:
    /// every process keeps running, nothing reaches it and it reaches nothing), then comes back. Needs
    /// the node's own network namespace.
    PartitionMidJoin(Duration),
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum FaultError {
    #[error(
        "annotation {FAULT_ANNOTATION}: unknown fault {0:?} (known: etcd-never-starts, etcd-slow-start, crash-mid-join, lost-after-join, partition-mid-join)"
    )]
    Unknown(String),
    #[error("annotation {FAULT_DELAY_ANNOTATION}: {0:?} is not a whole number of seconds")]
    Delay(String),
}

/// The fault named by `value`, with the delay from `delay` (seconds) where it takes one.
pub fn parse(value: &str, delay: Option<&str>) -> Result<Fault, FaultError> {
    let seconds = |default: u64| -> Result<Duration, FaultError> {
        match delay {
            None => Ok(Duration::from_secs(default)),
            Some(d) => d
                .trim()
                .parse::<u64>()
                .map(Duration::from_secs)
                .map_err(|_| FaultError::Delay(d.to_owned())),
        }
    };
    match value.trim() {
        "etcd-never-starts" => Ok(Fault::EtcdNeverStarts),
        "etcd-slow-start" => Ok(Fault::EtcdSlowStart(seconds(20)?)),
        "crash-mid-join" => Ok(Fault::CrashMidJoin),
        "lost-after-join" => Ok(Fault::LostAfterJoin(seconds(10)?)),
        "partition-mid-join" => Ok(Fault::PartitionMidJoin(seconds(20)?)),
        other => Err(FaultError::Unknown(other.to_owned())),
    }
}

/// The fault of a machine from its annotations (Machine first, then SimMachine).
pub fn of_machine(sources: &[&BTreeMap<String, String>]) -> Result<Option<Fault>, FaultError> {
    for annotations in sources {
        if let Some(value) = annotations.get(FAULT_ANNOTATION) {
            let delay = annotations.get(FAULT_DELAY_ANNOTATION).map(String::as_str);
            return parse(value, delay).map(Some);
        }
    }
    Ok(None)
}

/// A node cut off the network, and when it came back.
#[derive(Clone, Debug)]
pub struct Partition {
    pub namespace: String,
    pub machine: String,
    pub cut: Instant,
    pub healed: Option<Instant>,
}

/// Every partition the simulator made, in order; shared by the booting nodes and whoever watches.
#[derive(Clone, Debug, Default)]
pub struct PartitionLog(Arc<Mutex<Vec<Partition>>>);

impl PartitionLog {
    /// Notes that `namespace/machine` was cut off now; returns the entry's index for [`Self::healed`].
    pub fn cut(&self, namespace: &str, machine: &str) -> usize {
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        all.push(Partition {
            namespace: namespace.to_owned(),
            machine: machine.to_owned(),
            cut: Instant::now(),
            healed: None,
        });
        all.len() - 1
    }

    pub fn healed(&self, index: usize) {
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(p) = all.get_mut(index) {
            p.healed = Some(Instant::now());
        }
    }

    pub fn all(&self) -> Vec<Partition> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse_with_default_and_given_delays() {
        assert_eq!(parse("etcd-never-starts", None), Ok(Fault::EtcdNeverStarts));
        assert_eq!(
            parse("etcd-slow-start", None),
            Ok(Fault::EtcdSlowStart(Duration::from_secs(20)))
        );
        assert_eq!(
            parse("lost-after-join", Some("3")),
            Ok(Fault::LostAfterJoin(Duration::from_secs(3)))
        );
        assert_eq!(
            parse("partition-mid-join", None),
            Ok(Fault::PartitionMidJoin(Duration::from_secs(20)))
        );
        assert_eq!(
            parse("etcd-slow-start", Some("soon")),
            Err(FaultError::Delay("soon".into()))
        );
        assert!(
            parse("meteor", None)
                .unwrap_err()
                .to_string()
                .contains("unknown fault \"meteor\"")
        );
    }

    #[test]
    fn the_machine_annotation_wins_over_the_infrastructure_machine() {
        let machine: BTreeMap<String, String> =
            [(FAULT_ANNOTATION.to_owned(), "crash-mid-join".to_owned())].into();
        let sim: BTreeMap<String, String> =
            [(FAULT_ANNOTATION.to_owned(), "etcd-never-starts".to_owned())].into();
        assert_eq!(of_machine(&[&machine, &sim]), Ok(Some(Fault::CrashMidJoin)));
        assert_eq!(
            of_machine(&[&BTreeMap::new(), &sim]),
            Ok(Some(Fault::EtcdNeverStarts))
        );
        assert_eq!(of_machine(&[]), Ok(None));
    }
}
