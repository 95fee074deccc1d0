//! `--record FILE`: a benchmark appends its headline figures to a result
//! file, one tab-separated line each (`date commit figure value command`),
//! and `scripts/bench-table.sh` renders the newest line of every figure into
//! BENCHMARKS.md. The files are `docs/bench-results/*.tsv`; one that does not
//! exist yet is made with its header, titled after the benchmark.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::Command;

use anyhow::Context;
use serde_json::Value;

/// The flag every benchmark takes besides its own.
const FLAG: &str = "--record";

/// The columns of a result file, in order.
const HEADER: &str = "date\tcommit\tfigure\tvalue\tcommand";

/// The command line after the program's name without `--record FILE`:
/// what a benchmark's own parser reads (a `--record` without its file is
/// left in, for the parser to name).
pub fn args() -> std::vec::IntoIter<String> {
    split(std::env::args().skip(1)).0.into_iter()
}

fn split(args: impl Iterator<Item = String>) -> (Vec<String>, Option<PathBuf>) {
    let mut kept = Vec::new();
    let mut file = None;
    let mut it = args;
    while let Some(arg) = it.next() {
        match (arg == FLAG).then(|| it.next()).flatten() {
            Some(path) => file = Some(PathBuf::from(path)),
            None => kept.push(arg),
        }
    }
    (kept, file)
}

/// The text of the number or string at `pointer` in a report, `None` where
/// there is none.
pub fn at(report: &Value, pointer: &str) -> Option<String> {
    shown(report.pointer(pointer)?)
}

/// A number or string of a report as a table shows it: a whole number
/// without `.0`; `None` for null.
pub fn shown(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Null => None,
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 1e15 => Some(format!("{f:.0}")),
            _ => Some(n.to_string()),
        },
        value => Some(value.to_string()),
    }
}

/// Appends `figures` (name, value as shown) to the file `--record` names,
/// if it names one, leaving out those the run has no value for; `title`
/// heads a file made here.
pub fn append(title: &str, figures: &[(String, Option<String>)]) -> anyhow::Result<()> {
    let shown: Vec<(&String, &String)> = figures.iter().filter_map(|(name, value)| Some((name, value.as_ref()?))).collect();
    let (kept, Some(path)) = split(std::env::args().skip(1)) else { return Ok(()) };
    let program = std::env::args().next().unwrap_or_default();
    let command = std::iter::once(program).chain(kept).map(|a| quoted(&a)).collect::<Vec<_>>().join(" ");
    let date = time::OffsetDateTime::now_utc()
        .format(time::macros::format_description!("[year]-[month]-[day] [hour]:[minute] UTC"))
        .context("formatting the date")?;
    let commit = commit();
    let mut text = String::new();
    if !path.exists() {
        text.push_str(&format!("# title: {title}\n{HEADER}\n"));
    }
    for (name, value) in &shown {
        let fields = [date.as_str(), &commit, name, value, &command].map(|f| f.replace(['\t', '\n'], " "));
        text.push_str(&fields.join("\t"));
        text.push('\n');
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    file.write_all(text.as_bytes()).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("recorded {} figures in {}", shown.len(), path.display());
    Ok(())
}

/// The checked-out commit, said to have local changes when it has them.
fn commit() -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    match (git(&["rev-parse", "--short", "HEAD"]), git(&["status", "--porcelain", "--untracked-files=no"])) {
        (Some(head), Some(changes)) if !changes.is_empty() => format!("{head} with local changes"),
        (Some(head), _) => head,
        (None, _) => "unknown (not in a git checkout)".to_owned(),
    }
}

/// An argument as a shell reads it back.
fn quoted(arg: &str) -> String {
    if !arg.is_empty() && arg.chars().all(|c| c.is_ascii_alphanumeric() || "-_./,=:+@%".contains(c)) {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_flag_and_its_file_are_taken_out_of_the_command_line() {
        let args = |list: &[&str]| split(list.iter().map(|s| (*s).to_owned()));
        let (kept, file) = args(&["--tasks", "5", "--record", "out.tsv", "--rounds", "1"]);
        assert_eq!(
            (kept, file),
            (vec!["--tasks".into(), "5".into(), "--rounds".into(), "1".into()], Some(PathBuf::from("out.tsv")))
        );
        assert_eq!(args(&["--record"]), (vec!["--record".to_owned()], None));
    }

    #[test]
    fn arguments_are_quoted_only_when_a_shell_needs_it() {
        assert_eq!(quoted("--backlogs"), "--backlogs");
        assert_eq!(quoted("1,100"), "1,100");
        assert_eq!(quoted("it's here"), r"'it'\''s here'");
    }

    #[test]
    fn whole_numbers_show_without_a_fraction() {
        assert_eq!(shown(&serde_json::json!(1673.0)).as_deref(), Some("1673"));
        assert_eq!(shown(&serde_json::json!(14.6)).as_deref(), Some("14.6"));
        assert_eq!(shown(&serde_json::json!(8)).as_deref(), Some("8"));
        assert_eq!(shown(&Value::Null), None);
    }
}
