#![allow(missing_docs)]
use std::mem::size_of;
fn main() {
    use switchyard_core::*;
    println!("Event {}", size_of::<Event>());
    println!("PoolAction {}", size_of::<PoolAction>());
    println!("Proxy {}", size_of::<Proxy>());
    println!("AcquireError {}", size_of::<switchyard_core::pool::AcquireError>());
    println!("Route {}", size_of::<Route>());
    println!("TlsFacts {}", size_of::<TlsFacts>());
}
