//! The other process of the trace-context test: runs handler `mail` of topic `<topic>` on a
//! bus of Redis queues, with OpenTelemetry spans exported to memory, prints `ready` once the
//! bus runs, handles `<n>` messages, stops, and prints one line per `event_base.handle`
//! span it exported: `span trace=<trace id> span=<span id> parent=<parent span id> topic=<topic>`.
//!
//! `trace_child <redis url> <topic> <n>`

use std::io::Write;

use event_base::{handler_fn, Ack, EventBus, HandlerSpec, RedisQueueFactory};
use event_base_test::otel_memory::{exporter, finished_spans, topic_of};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: trace_child <redis url> <topic> <n>";
    let url = args.next().ok_or(usage)?;
    let topic = args.next().ok_or(usage)?;
    let n: usize = args.next().ok_or(usage)?.parse()?;
    exporter();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let queue = RedisQueueFactory::connect(&url).await?;
    let bus = EventBus::builder()
        .wal(queue.wal())
        .queue(queue)
        .handler(HandlerSpec::new(
            "mail",
            topic.as_str(),
            handler_fn(move |_| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send(());
                    Ack::Ack
                }
            }),
        ))
        .build()
        .await?;
    println!("ready");
    std::io::stdout().flush()?;
    for _ in 0..n {
        rx.recv().await.ok_or("the handler stopped")?;
    }
    bus.close().await?;
    for s in finished_spans() {
        if s.name == "event_base.handle" {
            println!(
                "span trace={} span={} parent={} topic={}",
                s.span_context.trace_id(),
                s.span_context.span_id(),
                s.parent_span_id,
                topic_of(&s).unwrap_or_default()
            );
        }
    }
    std::io::stdout().flush()?;
    Ok(())
}
