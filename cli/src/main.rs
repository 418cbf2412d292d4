//! `switchyard`: fetch URLs with a connection timeline, or run the demo.
// A command-line tool prints by design.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::process::ExitCode;

use clap::Parser;
use switchyard_cli::args::{Cli, Command};

fn main() -> ExitCode {
    match Cli::parse().command {
        // `get` starts the runtime its --runtime names.
        Command::Get(args) => exit(switchyard_cli::get::run(*args)),
        Command::Warm(args) => exit(switchyard_cli::warm::run(&args)),
        Command::Gateway(args) => exit(switchyard_cli::gateway::run(&args)),
        // The demo's servers and client run on tokio.
        Command::Demo(args) => {
            match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
                Ok(rt) => exit(rt.block_on(switchyard_cli::demo::run(args.json))),
                Err(e) => exit(Err(switchyard_cli::get::Failed(format!("cannot start the runtime: {e}")))),
            }
        }
    }
}

fn exit(result: Result<(), switchyard_cli::get::Failed>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("switchyard: error: {}", e.0);
            ExitCode::FAILURE
        }
    }
}
