//! The test tree's gRPC upstream (`strait.test.Stream`, tests/src/grpc.rs) as a
//! standalone server on one thread, for the performance lab's `grpc` scenario:
//! `grpc-origin 127.0.0.1:PORT`. Runs until killed.

use strait_e2e::grpc::GrpcUpstream;

fn main() {
    let Some(addr) = std::env::args().nth(1) else {
        eprintln!("usage: grpc-origin ADDRESS:PORT");
        std::process::exit(2);
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        let listener = match tokio::net::TcpListener::bind(&addr).await {
            Ok(listener) => listener,
            Err(error) => {
                eprintln!("grpc-origin: cannot listen on {addr}: {error}");
                std::process::exit(1);
            }
        };
        let origin = GrpcUpstream::serve(listener).await;
        eprintln!("grpc-origin: serving strait.test.Stream on {}", origin.addr);
        std::future::pending::<()>().await;
    });
}
