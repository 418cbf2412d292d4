//! The `switchyard` command's pieces: arguments, `get`, `demo`, timelines.
// A command-line tool prints by design.
#![allow(clippy::print_stdout, clippy::print_stderr)]

pub mod args;
pub mod demo;
pub mod gateway;
pub mod get;
pub mod timeline;
pub mod warm;
