//! Where a real node's boot goes, from what the node itself recorded: cloud-init's stage times
//! (`/run/cloud-init/status.json`) and the journal of the image import and of cloud-final, whose output is
//! kubeadm's (`journalctl -o short-unix`: each line with its time). kubeadm prints each phase's work with
//! the phase's tag (`[certs] …`, `[etcd] …`); a phase's time runs from its first line until the next
//! phase's first line. The steps follow each other, so they add up to the whole bootstrap.

use std::collections::BTreeMap;

/// The units whose journal [`steps`] reads.
pub const JOURNAL_UNITS: [&str; 2] = ["node-images.service", "cloud-final.service"];

/// What a node recorded of its boot, and the two moments seen from outside.
pub struct BootRecord<'a> {
    /// When its Machine appeared (unix seconds).
    pub created: f64,
    /// When the node's systemd started.
    pub booted: f64,
    /// `/run/cloud-init/status.json`.
    pub status_json: &'a str,
    /// `journalctl -o short-unix` of [`JOURNAL_UNITS`].
    pub journal: &'a str,
}

/// One step of a boot.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub what: String,
    pub seconds: f64,
}

/// How the node bootstrapped, from the phases kubeadm printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Init,
    ControlPlaneJoin,
    WorkerJoin,
}

impl Role {
    pub fn describe(self) -> &'static str {
        match self {
            Role::Init => "kubeadm init",
            Role::ControlPlaneJoin => "control-plane join",
            Role::WorkerJoin => "worker join",
        }
    }
}

/// A node's boot, step by step.
#[derive(Clone, Debug, PartialEq)]
pub struct Boot {
    pub role: Role,
    pub steps: Vec<Step>,
    /// When cloud-init finished its last stage (the bootstrap's last command ran before it).
    pub finished: f64,
    /// How long the node's image import took (it runs beside cloud-init's first stages).
    pub images: Option<f64>,
}

impl Boot {
    /// From Machine creation until cloud-init finished.
    pub fn total(&self) -> f64 {
        self.steps.iter().map(|s| s.seconds).sum()
    }
}

/// A journal line: its time and its message (after `identifier[pid]: `).
fn journal_lines(journal: &str) -> Vec<(f64, &str)> {
    journal
        .lines()
        .filter_map(|line| {
            let (time, rest) = line.split_once(' ')?;
            let time: f64 = time.parse().ok()?;
            let (_, message) = rest.split_once(": ")?;
            Some((time, message))
        })
        .collect()
}

/// Tags kubeadm prints inside another phase: patches are applied by the phase that writes the file,
/// and what comes after them (etcd's wait for its new member) is still that phase's.
const WITHIN_A_PHASE: [&str; 1] = ["patches"];

/// Whether `message` is a log line inside a phase: kubeadm's klog (`W1206 14:47:17.846327 …`) or its
/// etcd client's JSON (`{"level":"warn",…}`).
fn is_log(message: &str) -> bool {
    if message.starts_with('{') {
        return true;
    }
    let mut chars = message.chars();
    matches!(chars.next(), Some('I' | 'W' | 'E' | 'F'))
        && chars.by_ref().take(4).filter(char::is_ascii_digit).count() == 4
        && chars.next() == Some(' ')
}

/// kubeadm's phase tag of a line (`[certs] Generating …` → `certs`); `None` for an indented line
/// (a warning under its phase) or one without a tag.
fn phase_tag(message: &str) -> Option<&str> {
    let tag = message.strip_prefix('[')?.split_once(']')?.0;
    (!tag.is_empty() && tag.chars().all(|c| c.is_ascii_lowercase() || c == '-')).then_some(tag)
}

fn stage(status: &serde_json::Value, name: &str, at: &str) -> Result<f64, String> {
    status["v1"][name][at]
        .as_f64()
        .ok_or_else(|| format!("cloud-init's status.json has no {name}.{at}"))
}

/// The steps of one node's boot, from its Machine's creation until cloud-init finished.
pub fn steps(record: &BootRecord) -> Result<Boot, String> {
    let status: serde_json::Value = serde_json::from_str(record.status_json)
        .map_err(|e| format!("cloud-init's status.json: {e}"))?;
    let local = stage(&status, "init-local", "start")?;
    let configured = stage(&status, "modules-config", "finished")?;
    let final_start = stage(&status, "modules-final", "start")?;
    let finished = stage(&status, "modules-final", "finished")?;
    let lines = journal_lines(record.journal);
    let images = {
        let started = lines
            .iter()
            .find(|(_, m)| m.starts_with("Starting node-images.service"));
        let done = lines
            .iter()
            .find(|(_, m)| m.starts_with("Finished node-images.service"));
        started.zip(done).map(|(s, d)| d.0 - s.0)
    };

    // kubeadm's phases: runs of lines with the same tag; an untagged line after them is kubeadm's
    // closing message.
    let mut phases: Vec<(&str, f64)> = Vec::new();
    let mut kubeadm_end = None;
    for (time, message) in lines.iter().filter(|(t, _)| *t >= final_start) {
        if kubeadm_end.is_some() || message.starts_with(char::is_whitespace) || is_log(message) {
            continue;
        }
        match phase_tag(message) {
            Some(tag) if WITHIN_A_PHASE.contains(&tag) => {}
            Some(tag) if phases.last().is_none_or(|(last, _)| *last != tag) => {
                phases.push((tag, *time));
            }
            Some(_) => {}
            None if !phases.is_empty() => kubeadm_end = Some(*time),
            None => {}
        }
    }
    let Some((_, kubeadm_start)) = phases.first().copied() else {
        return Err("cloud-final's journal has no kubeadm phase".into());
    };
    let kubeadm_end = kubeadm_end.unwrap_or(finished);
    let tags: Vec<&str> = phases.iter().map(|(tag, _)| *tag).collect();
    let role = if tags.contains(&"init") {
        Role::Init
    } else if tags.contains(&"control-plane") {
        Role::ControlPlaneJoin
    } else {
        Role::WorkerJoin
    };
    let mut per_phase: Vec<(&str, f64)> = Vec::new();
    for (i, (tag, start)) in phases.iter().enumerate() {
        let end = phases.get(i + 1).map_or(kubeadm_end, |next| next.1);
        match per_phase.iter_mut().find(|(t, _)| t == tag) {
            Some((_, total)) => *total += end - start,
            None => per_phase.push((tag, end - start)),
        }
    }

    let step = |what: String, from: f64, to: f64| Step {
        what,
        seconds: to - from,
    };
    let mut out = vec![
        step(
            "Machine created → node's systemd started (bootstrap data, then the machine)".into(),
            record.created,
            record.booted,
        ),
        step("systemd → cloud-init".into(), record.booted, local),
        step(
            "cloud-init: local, network and config stages".into(),
            local,
            configured,
        ),
        step(
            "until cloud-final may start (multi-user.target: the node's image import)".into(),
            configured,
            final_start,
        ),
        step(
            "cloud-final: bootstrap commands before kubeadm".into(),
            final_start,
            kubeadm_start,
        ),
    ];
    out.extend(per_phase.into_iter().map(|(tag, seconds)| Step {
        what: format!("kubeadm [{tag}]"),
        seconds,
    }));
    out.push(step(
        "after kubeadm: the commands after it, the sentinel, cloud-init's end".into(),
        kubeadm_end,
        finished,
    ));
    Ok(Boot {
        role,
        steps: out,
        finished,
        images,
    })
}

/// The median of each step over `boots` (of one role), in the order the steps first appear.
pub fn medians(boots: &[&Boot]) -> Vec<Step> {
    let mut order: Vec<String> = Vec::new();
    let mut values: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for boot in boots {
        for step in &boot.steps {
            if !order.contains(&step.what) {
                order.push(step.what.clone());
            }
            values
                .entry(step.what.clone())
                .or_default()
                .push(step.seconds);
        }
    }
    order
        .into_iter()
        .map(|what| {
            let mut v = values.remove(&what).unwrap_or_default();
            v.sort_by(f64::total_cmp);
            Step {
                seconds: v.get(v.len() / 2).copied().unwrap_or_default(),
                what,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = r#"{"v1": {
        "init-local": {"errors": [], "start": 1000.5, "finished": 1000.6},
        "init": {"errors": [], "start": 1000.9, "finished": 1001.7},
        "modules-config": {"errors": ["('locale', …)"], "start": 1002.0, "finished": 1002.4},
        "modules-final": {"errors": [], "start": 1009.5, "finished": 1040.0},
        "modules-init": {"errors": [], "start": null, "finished": null},
        "stage": null}}"#;

    /// A control-plane join as a real node's journal shows it (shortened).
    const JOIN: &str = "\
1000.3 cp-1 systemd[1]: Starting node-images.service - Import the node's container images...
1009.2 cp-1 systemd[1]: Finished node-images.service - Import the node's container images.
1009.3 cp-1 systemd[1]: Starting cloud-final.service - Execute cloud user/final scripts...
1009.6 cp-1 cloud-init[210]: Cloud-init v. 22.4.2 running 'modules:final' at Sun, 06 Dec 2026 14:47:16 +0000.
1010.0 cp-1 cloud-init[210]: [preflight] Running pre-flight checks
1010.1 cp-1 cloud-init[210]:         [WARNING Hostname]: hostname \"cp-1\" could not be reached
1011.0 cp-1 cloud-init[210]: [certs] Using certificateDir folder \"/etc/kubernetes/pki\"
1012.0 cp-1 cloud-init[210]: [control-plane] Creating static Pod manifest for \"kube-apiserver\"
1012.1 cp-1 cloud-init[210]: [patches] Applied patch of type \"application/strategic-merge-patch+json\" to target \"kube-apiserver\"
1012.5 cp-1 cloud-init[210]: [kubelet-start] Starting the kubelet
1013.0 cp-1 cloud-init[210]: [etcd] Announced new etcd member joining to the existing etcd cluster
1013.1 cp-1 cloud-init[210]: [patches] Applied patch of type \"application/strategic-merge-patch+json\" to target \"etcd\"
1024.0 cp-1 cloud-init[210]: [etcd] Waiting for the new etcd member to join the cluster. This can take up to 40s
1025.0 cp-1 cloud-init[210]: W1206 14:47:28.231138     256 etcd.go:601] a klog line stays in its phase
1026.0 cp-1 cloud-init[210]: {\"level\":\"warn\",\"logger\":\"etcd-client\",\"msg\":\"retrying of unary invoker failed\"}
1030.0 cp-1 cloud-init[210]: [kubelet-start] Waiting for the kubelet to perform the TLS Bootstrap
1036.0 cp-1 cloud-init[210]: [control-plane-check] kube-apiserver is healthy after 29.142511ms
1036.5 cp-1 cloud-init[210]: This node has joined the cluster and a new control plane instance was created:
1036.5 cp-1 cloud-init[210]: * Certificate signing request was sent to apiserver and approval was received.
1037.0 cp-1 cloud-init[624]: [ssh-keys] a tagged line after kubeadm is not kubeadm's
1040.0 cp-1 systemd[1]: Finished cloud-final.service - Execute cloud user/final scripts.
";

    fn seconds(boot: &Boot, what: &str) -> f64 {
        let step = boot.steps.iter().find(|s| s.what == what);
        step.unwrap_or_else(|| panic!("no step {what:?} in {:?}", boot.steps))
            .seconds
    }

    #[test]
    fn a_join_is_split_into_cloud_init_stages_and_kubeadm_phases_that_add_up() {
        let boot = steps(&BootRecord {
            created: 997.0,
            booted: 1000.0,
            status_json: STATUS,
            journal: JOIN,
        })
        .unwrap();
        assert_eq!(boot.role, Role::ControlPlaneJoin);
        assert!((boot.images.unwrap() - 8.9).abs() < 1e-9);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(
            seconds(
                &boot,
                "Machine created → node's systemd started (bootstrap data, then the machine)"
            ),
            3.0
        ));
        assert!(close(seconds(&boot, "systemd → cloud-init"), 0.5));
        assert!(close(
            seconds(&boot, "cloud-init: local, network and config stages"),
            1.9
        ));
        assert!(close(
            seconds(
                &boot,
                "until cloud-final may start (multi-user.target: the node's image import)"
            ),
            7.1
        ));
        assert!(close(
            seconds(&boot, "cloud-final: bootstrap commands before kubeadm"),
            0.5
        ));
        // The warning line stays in preflight; a patch applied belongs to the phase that applied it.
        assert!(close(seconds(&boot, "kubeadm [preflight]"), 1.0));
        assert!(close(seconds(&boot, "kubeadm [control-plane]"), 0.5));
        assert!(!boot.steps.iter().any(|s| s.what.contains("patches")));
        // Both runs of kubelet-start count: 0.5 s starting it, 6 s waiting for its TLS bootstrap.
        assert!(close(seconds(&boot, "kubeadm [kubelet-start]"), 6.5));
        assert!(close(seconds(&boot, "kubeadm [etcd]"), 17.0));
        // The last phase runs until kubeadm's closing message; a tagged line after it is not kubeadm's.
        assert!(close(seconds(&boot, "kubeadm [control-plane-check]"), 0.5));
        assert!(!boot.steps.iter().any(|s| s.what.contains("ssh-keys")));
        assert!(close(
            seconds(
                &boot,
                "after kubeadm: the commands after it, the sentinel, cloud-init's end"
            ),
            3.5
        ));
        assert!(close(boot.total(), 1040.0 - 997.0), "{}", boot.total());
        assert!(close(boot.finished, 1040.0));
    }

    #[test]
    fn the_role_comes_from_the_phases_kubeadm_ran() {
        let journal = |lines: &[&str]| {
            lines
                .iter()
                .enumerate()
                .map(|(i, l)| format!("{}.0 n cloud-init[1]: {l}\n", 1010 + i))
                .collect::<String>()
        };
        let role = |j: &str| {
            steps(&BootRecord {
                created: 999.0,
                booted: 1000.0,
                status_json: STATUS,
                journal: j,
            })
            .unwrap()
            .role
        };
        let init = journal(&[
            "[init] Using Kubernetes version: v1.34.4",
            "[certs] x",
            "[control-plane] y",
        ]);
        assert_eq!(role(&init), Role::Init);
        let worker = journal(&[
            "[preflight] Running pre-flight checks",
            "[kubelet-start] Starting the kubelet",
        ]);
        assert_eq!(role(&worker), Role::WorkerJoin);
        let missing = steps(&BootRecord {
            created: 999.0,
            booted: 1000.0,
            status_json: STATUS,
            journal: "1010.0 n cloud-init[1]: no kubeadm here\n",
        });
        assert_eq!(
            missing.unwrap_err(),
            "cloud-final's journal has no kubeadm phase"
        );
        let bad = steps(&BootRecord {
            created: 999.0,
            booted: 1000.0,
            status_json: r#"{"v1": {}}"#,
            journal: &worker,
        });
        assert_eq!(
            bad.unwrap_err(),
            "cloud-init's status.json has no init-local.start"
        );
    }

    #[test]
    fn medians_keep_the_order_steps_first_appear_in() {
        let boot = |values: [f64; 2]| Boot {
            role: Role::WorkerJoin,
            steps: vec![
                Step {
                    what: "a".into(),
                    seconds: values[0],
                },
                Step {
                    what: "b".into(),
                    seconds: values[1],
                },
            ],
            finished: 0.0,
            images: None,
        };
        let (x, y, z) = (boot([1.0, 9.0]), boot([3.0, 7.0]), boot([2.0, 8.0]));
        let m = medians(&[&x, &y, &z]);
        assert_eq!(
            m,
            vec![
                Step {
                    what: "a".into(),
                    seconds: 2.0
                },
                Step {
                    what: "b".into(),
                    seconds: 8.0
                }
            ]
        );
    }
}
