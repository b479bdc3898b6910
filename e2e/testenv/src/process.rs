//! Child processes owned by a test: spawned with their output in a log file, stopped by PID when dropped
//! (also while a panicking test unwinds), and killed by the kernel if the test process itself dies.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::Error;

/// How long a process gets to exit after SIGTERM before it is killed.
const GRACE: Duration = Duration::from_secs(5);

pub struct Process {
    name: String,
    child: Child,
    log: PathBuf,
    exited: Option<ExitStatus>,
}

impl Process {
    /// Starts `command` with stdout and stderr appended to `log`.
    pub fn spawn(name: &str, mut command: Command, log: &Path) -> Result<Self, Error> {
        let out = File::options()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| Error::io(format!("open log {}", log.display()), e))?;
        let err = out
            .try_clone()
            .map_err(|e| Error::io("clone log handle", e))?;
        command.stdin(Stdio::null()).stdout(out).stderr(err);
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            command.pre_exec(|| {
                // The child dies with the thread that spawned it if the test process is killed outright.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let program = command.get_program().to_string_lossy().into_owned();
        let child = command
            .spawn()
            .map_err(|e| Error::io(format!("start {name} ({program})"), e))?;
        tracing::debug!(name, pid = child.id(), log = %log.display(), "started");
        Ok(Self {
            name: name.to_owned(),
            child,
            log: log.to_owned(),
            exited: None,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The exit status if the process has ended on its own.
    pub fn try_exit_status(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().ok().flatten();
        }
        self.exited
    }

    /// The last lines of the log, for error messages.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log, lines)
    }

    /// Fails with the log tail when the process has exited.
    pub fn ensure_running(&mut self) -> Result<(), Error> {
        match self.try_exit_status() {
            None => Ok(()),
            Some(status) => Err(Error::Exited {
                what: self.name.clone(),
                status: status.to_string(),
                log_tail: self.log_tail(30),
            }),
        }
    }

    /// Sends SIGTERM and waits up to `grace`; returns the exit status if the process ended in time.
    pub fn terminate(&mut self, grace: Duration) -> Option<ExitStatus> {
        if let Some(status) = self.try_exit_status() {
            return Some(status);
        }
        // SAFETY: plain syscall on the PID of our own unreaped child, so it cannot have been reused.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Some(status) = self.try_exit_status() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Sends SIGKILL (no shutdown of any kind, as a power cut would) and reaps the child.
    pub fn kill(&mut self) {
        if self.try_exit_status().is_none() {
            let _ = self.child.kill();
            self.exited = self.child.wait().ok();
        }
    }

    /// Sends SIGTERM, waits up to a grace period, then SIGKILL; always reaps the child.
    pub fn stop(&mut self) {
        if self.terminate(GRACE).is_some() {
            return;
        }
        tracing::warn!(name = %self.name, pid = self.child.id(), "did not stop after SIGTERM; killing");
        let _ = self.child.kill();
        self.exited = self.child.wait().ok();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Stops (`SIGSTOP`) or resumes (`SIGCONT`) the process with this PID, as a scheduler that gives it no
/// time would; false when no such process could be signalled.
pub fn set_paused(pid: u32, paused: bool) -> bool {
    let signal = if paused { libc::SIGSTOP } else { libc::SIGCONT };
    // SAFETY: sends a signal to a PID; no memory is shared.
    unsafe { libc::kill(pid as libc::pid_t, signal) == 0 }
}

/// Sends SIGKILL to the process with this PID (one this process did not start: its parent reaps it);
/// false when no such process could be signalled.
pub fn kill_pid(pid: u32) -> bool {
    // SAFETY: sends a signal to a PID; no memory is shared.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) == 0 }
}

/// True while a process with this PID exists (and is not a zombie we own).
pub fn pid_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    if r != 0 {
        return false;
    }
    // A zombie still answers kill(0); it is dead for our purposes.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
