//! `scripts/setup.sh` talks while it works: a long step (an apt install, a
//! `cargo install` of minutes) says every few seconds that it goes on, with
//! its command's newest line, so a newcomer never watches a silent terminal
//! for more than 10 s; a failing step shows its whole output and fails
//! set-up with its status.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The longest a newcomer may wait for set-up's next line.
const LONGEST_SILENCE: Duration = Duration::from_secs(10);

fn setup_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/setup.sh")
}

/// Runs `talking` from set-up on `command` (bash), returning each line it
/// printed with when it came, and the exit status.
fn talk(command: &str) -> (Vec<(Instant, String)>, Option<i32>) {
    let script = format!("source {}; talking 'a long step' bash -c {command:?}", setup_script().display());
    let mut child =
        Command::new("bash").args(["-c", &script]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("bash runs");
    let lines = BufReader::new(child.stderr.take().expect("stderr"))
        .lines()
        .map_while(Result::ok)
        .map(|line| (Instant::now(), line))
        .collect();
    (lines, child.wait().expect("bash ends").code())
}

#[test]
fn a_long_step_is_never_silent_for_ten_seconds_and_shows_its_latest_line() {
    let started = Instant::now();
    let (lines, status) = talk("echo fetching the first part; sleep 12; echo done");
    assert_eq!(status, Some(0), "{lines:?}");
    assert!(lines.len() >= 2, "the step spoke while it ran: {lines:?}");
    let mut last = started;
    for (at, line) in &lines {
        assert!(at.duration_since(last) <= LONGEST_SILENCE, "{:?} of silence before {line:?}", at.duration_since(last));
        assert!(line.starts_with("setup:   a long step: ") && line.ends_with(" s · fetching the first part"), "{line:?}");
        last = *at;
    }
    assert!(last.elapsed() <= LONGEST_SILENCE, "and no long silence at its end");
}

#[test]
fn a_failing_step_shows_its_output_and_fails_with_its_status() {
    let (lines, status) = talk("echo the mirror is unreachable; exit 3");
    assert_eq!(status, Some(3), "{lines:?}");
    let text: Vec<&str> = lines.iter().map(|(_, l)| l.as_str()).collect();
    assert_eq!(text, ["setup: a long step failed (exit 3); its output:", "the mirror is unreachable"]);
}
