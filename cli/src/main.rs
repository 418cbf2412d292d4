//! `switchyard`: fetch URLs with a connection timeline, or run the demo.
// A command-line tool prints by design.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::process::ExitCode;

use switchyard_cli::args::Command;
use switchyard_cli::exit::Failed;

fn main() -> ExitCode {
    let cli = match switchyard_cli::args::parse(std::env::args_os()) {
        Ok(cli) => cli,
        Err(e) => return exit(Err(e)),
    };
    match cli.command {
        // `get` starts the runtime its --runtime names.
        Command::Get(args) => exit(switchyard_cli::get::run(*args)),
        Command::Warm(args) => exit(switchyard_cli::warm::run(&args)),
        Command::Gateway(args) => exit(switchyard_cli::gateway::run(&args)),
        // The demo's servers and client run on tokio.
        Command::Demo(args) => {
            match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
                Ok(rt) => exit(rt.block_on(switchyard_cli::demo::run(args.json))),
                Err(e) => exit(Err(Failed::new(format!("cannot start the runtime: {e}")))),
            }
        }
    }
}

/// The exit code; the error's line, unless a transfer's already printed it.
fn exit(result: Result<(), Failed>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if e.message.starts_with('(') {
                // A failure that names its exit code, as a transfer's does.
                eprintln!("switchyard: {}", e.message);
            } else if !e.message.is_empty() {
                eprintln!("switchyard: error: {}", e.message);
            }
            ExitCode::from(e.code.max(1))
        }
    }
}
