//! The process-wide node identity: the host name and `Host` until set; `set_node_name` and
//! `set_node_type` change what every bus built afterwards takes; a running bus keeps its own.
//! (One test, since the defaults are process-wide.)

use event_base::{node_name, node_type, set_node_name, set_node_type, Ack, NodeType};
use event_base_test::Probe;

#[tokio::test]
async fn buses_take_the_process_defaults_when_they_are_built() {
    assert_eq!(node_type(), NodeType::Host);
    let default_name = node_name();
    assert!(!default_name.is_empty());
    if let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        assert_eq!(default_name, host.trim(), "the host name by default");
    }
    let first = event_base::builder()
        .handler(Probe::new().handler("h", "t", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    assert_eq!(first.node_name(), default_name);

    set_node_name("edge-3");
    set_node_type(NodeType::Worker);
    set_node_name(""); // ignored
    assert_eq!(node_name(), "edge-3");
    assert_eq!(node_type(), NodeType::Worker);
    let second = event_base::builder()
        .handler(Probe::new().handler("h", "t", |_| Ack::Ack))
        .build()
        .await
        .unwrap();
    assert_eq!(second.node_name(), "edge-3");
    assert_eq!(second.node_type(), NodeType::Worker);
    assert_eq!(second.registry().get("h-0").unwrap().node, "edge-3");
    // The first bus keeps the identity it was built with.
    assert_eq!(first.node_name(), default_name);
    assert_eq!(first.node_type(), NodeType::Host);
}
