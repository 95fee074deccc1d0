//! Key material out of the process environment. Once the configuration is
//! loaded (it keeps only digests of API keys and its own copy of the
//! secret), the variables that carry keys are removed from the environment,
//! so no child process (a desktop, a terminal, a coding CLI) inherits them,
//! and their values are overwritten in the process's initial environment
//! block, so `/proc/<pid>/environ` no longer shows them either.
//!
//! The block is written through `/proc/self/mem`, as the workspace forbids
//! unsafe code; where that cannot be done the variables are still removed
//! and the error says what was left.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};

/// Removes `vars` from the environment and blanks their values in the
/// initial environment block.
pub(super) fn scrub_process_env(vars: &[&str]) -> Result<(), String> {
    for var in vars {
        std::env::remove_var(var);
    }
    blank_initial_block(vars).map_err(|e| format!("key variables removed, but /proc/self/environ still shows them: {e}"))
}

fn blank_initial_block(vars: &[&str]) -> std::io::Result<()> {
    let (start, end) = initial_block()?;
    let mut mem = OpenOptions::new().read(true).write(true).open("/proc/self/mem")?;
    let mut block = vec![0u8; usize::try_from(end.saturating_sub(start)).unwrap_or(0)];
    mem.seek(SeekFrom::Start(start))?;
    mem.read_exact(&mut block)?;
    for (offset, len) in values_of(&block, vars) {
        mem.seek(SeekFrom::Start(start + offset as u64))?;
        mem.write_all(&vec![0u8; len])?;
    }
    Ok(())
}

/// Where the initial environment block lies: fields 50 and 51 of
/// `/proc/self/stat` (`env_start`, `env_end`).
fn initial_block() -> std::io::Result<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let bad = || std::io::Error::other("unexpected /proc/self/stat");
    // Fields from the third on follow the command name's closing parenthesis.
    let rest = stat.rsplit_once(')').ok_or_else(bad)?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok()).ok_or_else(bad);
    Ok((field(50)?, field(51)?))
}

/// The (offset, length) of the value of each `VAR=value` entry of `block`
/// whose name is one of `vars`.
fn values_of(block: &[u8], vars: &[&str]) -> Vec<(usize, usize)> {
    let mut found = Vec::new();
    let mut offset = 0;
    for entry in block.split(|b| *b == 0) {
        let name_len = entry.iter().position(|b| *b == b'=');
        if let Some(name_len) = name_len.filter(|n| vars.iter().any(|v| v.as_bytes() == &entry[..*n])) {
            found.push((offset + name_len + 1, entry.len() - name_len - 1));
        }
        offset += entry.len() + 1;
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_values_of_the_named_variables_only() {
        let block = b"PATH=/bin\0FLOTILLA_API_KEYS=flt_x=acme\0FLOTILLA_API_KEYS_FILE=/k\0FLOTILLA_ADMIN_KEY=\0";
        let found = values_of(block, &["FLOTILLA_API_KEYS", "FLOTILLA_ADMIN_KEY"]);
        assert_eq!(found, [(28, 10), (84, 0)]);
        assert_eq!(&block[28..38], b"flt_x=acme");
    }

    #[test]
    fn the_initial_block_is_found() {
        let (start, end) = initial_block().expect("/proc/self/stat");
        assert!(start < end, "{start}..{end}");
    }
}
