//! `flotilla-spawner`: started once inside a sandbox's jail with its
//! control socket on standard input; serves start requests until the host
//! closes it. See the library for the protocol.

use std::os::fd::AsFd;
use std::process::ExitCode;

fn main() -> ExitCode {
    let control = match std::io::stdin().as_fd().try_clone_to_owned() {
        Ok(control) => control,
        Err(e) => {
            eprintln!("flotilla-spawner: no control socket on standard input: {e}");
            return ExitCode::FAILURE;
        }
    };
    match flotilla_spawner::serve(control) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("flotilla-spawner: {e}");
            ExitCode::FAILURE
        }
    }
}
