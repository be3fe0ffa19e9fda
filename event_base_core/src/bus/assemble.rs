//! The steps `EventBusBuilder::build` takes, each a function: the topic table from the
//! handler specs, the bus's tasks (scheduler, routers), auditing, metrics export.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crate::backend::queue::TopicQueue;
use crate::backend::queue_factory::QueueFactory;
use crate::bus::observe::audit_publisher::run_audit_publisher;
use crate::bus::shared::BusShared;
use crate::bus::tasks::BusTasks;
use crate::delivery::log::log_queue::{LogAppender, LogConsumer, LogProducer};
use crate::delivery::log::topic_log::{TopicLog, CLAIM_RUN, MAX_SUBSCRIPTIONS};
use crate::delivery::remote::sent_to::SentTo;
use crate::delivery::send::scheduler::{run_scheduler, SchedulerReceiver};
use crate::delivery::subscription::consumer_router::ConsumerRouter;
use crate::delivery::subscription::job_channel::job_channel;
use crate::delivery::subscription::key_order::KeyOrder;
use crate::delivery::subscription::keyed_producer::KeyedProducer;
use crate::delivery::subscription::rate_gate::{Gcra, RateGate};
use crate::delivery::subscription::topic_hasher::TopicMap;
use crate::delivery::subscription::topic_table::{Route, TopicEntry, TopicTable};
use crate::error::CoreError;
use crate::handler::middleware::Middleware;
use crate::handler::runtime::HandlerRuntime;
use crate::handler::spec::HandlerSpec;
use crate::message::topic::MessageTopic;
use crate::observe::audit_record::AuditWriter;
use crate::observe::audit_writer_thread::spawn_writer_thread;
use crate::observe::topic_counters::TopicCounters;

/// The topic table and every handler's runtime, as [`topic_table`] builds them.
pub(crate) type Topics = (TopicTable, Vec<Arc<HandlerRuntime>>);

/// One [`Route`] per topic, in declaration order, with a [`TopicEntry`] (a subscription, with
/// its own queue) per handler; and one [`HandlerRuntime`] per spec (in the order of `specs`).
/// `sent_to`: with a shared backend, where the subscriptions of shared queues are tracked.
pub(crate) fn topic_table(
    specs: &[HandlerSpec],
    queue: &dyn QueueFactory,
    batch_size: usize,
    topic_log: bool,
    global_middleware: &[Arc<dyn Middleware>],
    sent_to: Option<&SentTo>,
) -> Result<Topics, CoreError> {
    let mut subs: Vec<(MessageTopic, Vec<Arc<TopicEntry>>)> = Vec::new();
    let mut handlers: Vec<Arc<HandlerRuntime>> = Vec::with_capacity(specs.len());
    // The topics kept in a topic log (an in-memory backend), each with its log.
    let log_spec = queue.topic_log().filter(|_| topic_log);
    let mut logs: Vec<(MessageTopic, Arc<TopicLog>)> = Vec::new();
    for spec in specs {
        let siblings = specs.iter().filter(|s| s.topic == spec.topic).count();
        // The state words of the topic log's fanned-out messages, if it has some.
        let mut copies = None;
        let q = match log_spec.filter(|_| siblings <= MAX_SUBSCRIPTIONS) {
            Some(log_spec) => {
                let index = subs
                    .iter()
                    .find(|(t, _)| *t == spec.topic)
                    .map_or(0, |(_, list)| list.len());
                let log = match logs.iter().find(|(t, _)| *t == spec.topic) {
                    Some((_, log)) => log.clone(),
                    None => {
                        let log = TopicLog::new(siblings, log_spec.bound());
                        logs.push((spec.topic.clone(), log.clone()));
                        log
                    }
                };
                copies = log.copies().cloned();
                TopicQueue {
                    producer: Arc::new(LogProducer::new(log.clone(), index, spec.topic.clone())),
                    consumer: Arc::new(LogConsumer::new(
                        log,
                        index,
                        spec.topic.clone(),
                        spec.workers,
                    )),
                }
            }
            None => queue.create_subscription(&spec.topic, &spec.name)?,
        };
        let (work_tx, work_rx) = job_channel(batch_size.max(spec.workers));
        let handler: Arc<str> = Arc::from(spec.name.as_str());
        // A queue other processes share counts in flight where it is claimed.
        let shared = sent_to.filter(|_| q.consumer.requires_ack());
        let producer = match shared {
            Some(sent_to) if !spec.topic.is_system() => {
                sent_to.track(&spec.topic, &handler, true, q.producer)
            }
            _ => q.producer,
        };
        // Keyed messages enter their lines where their order is known: as an in-memory
        // queue takes them (its workers claim for themselves), or as the router claims them.
        let keys = Arc::new(KeyOrder::new(work_tx.clone()));
        let keys_at_claim = q.consumer.requires_ack();
        // A topic log's workers claim runs (`delivery/log/`); other queues one at a time.
        let claim_run = match log_spec.filter(|_| siblings <= MAX_SUBSCRIPTIONS) {
            Some(log_spec) => claim_run(log_spec.bound(), spec.workers),
            None => 1,
        };
        let producer: Arc<dyn crate::backend::EProducer> = if keys_at_claim {
            producer
        } else {
            Arc::new(KeyedProducer::new(producer, keys.clone()))
        };
        let entry = Arc::new(TopicEntry {
            topic: spec.topic.clone(),
            handler,
            fan_out: siblings > 1,
            claim_counted: shared.is_some(),
            producer,
            consumer: q.consumer,
            work_tx,
            work_rx,
            workers: RwLock::new(Vec::with_capacity(spec.workers)),
            counters: TopicCounters::default(),
            keys,
            keys_at_claim,
            claim_run,
            rate: spec.rate.map(
                |rate| match queue.rate_limiter(&spec.topic, &spec.name, rate) {
                    Some(shared) => RateGate::Shared(shared),
                    None => RateGate::Local(Gcra::new(rate)),
                },
            ),
            pause: Default::default(),
            copies,
        });
        match subs.iter_mut().find(|(t, _)| *t == spec.topic) {
            Some((_, list)) => list.push(entry),
            None => subs.push((spec.topic.clone(), vec![entry])),
        }
        // Global middleware is for the application's handlers; the bus's own and any
        // handler on a system topic run bare, so a refusing middleware cannot break, say,
        // shutdown by message.
        let global: &[Arc<dyn Middleware>] = if spec.topic.is_system() {
            &[]
        } else {
            global_middleware
        };
        handlers.push(Arc::new(HandlerRuntime::new(spec, global)));
        if !spec.topic.is_system() {
            tracing::info!(target: crate::constant::target::BUS, handler = %spec.name, topic = %spec.topic, workers = spec.workers, "handler registered");
        }
    }
    let mut topics = TopicMap::default();
    for (topic, list) in subs {
        let mut route = Route::new(topic.clone(), list);
        if let Some((_, log)) = logs.iter().find(|(t, _)| *t == topic) {
            route.log = Some(LogAppender::new(log.clone()));
        }
        topics.insert(topic, Arc::new(route));
    }
    Ok((topics, handlers))
}

/// The longest run a worker of a topic log claims at once: [`CLAIM_RUN`], but no more than
/// an eighth of the log's bound shared among the subscription's `workers`, so that what
/// workers hold claimed, out of the log, adds at most an eighth to what the bound lets wait
/// (a bound of 8 with one worker claims one at a time, as a queue does).
fn claim_run(bound: Option<usize>, workers: usize) -> usize {
    match bound {
        Some(bound) => (bound / (8 * workers.max(1))).clamp(1, CLAIM_RUN),
        None => CLAIM_RUN,
    }
}

/// The bus's tasks with the scheduler and the router tasks running; no worker yet.
///
/// One router per subscription (a handler of a topic): its own task for queues that need
/// acks, otherwise shared by the handler's workers, which claim for themselves.
pub(crate) fn bus_tasks(
    shared: &Arc<BusShared>,
    handlers: &[Arc<HandlerRuntime>],
    scheduler_rx: SchedulerReceiver,
) -> Arc<BusTasks> {
    let mut routers = HashMap::new();
    let mut router_tasks = Vec::new();
    for route in shared.delivery.topics.values() {
        for entry in route.subs.iter() {
            let router = ConsumerRouter::new(shared.delivery.clone(), entry.clone());
            if router.workers_claim_directly() {
                routers.insert(entry.handler.to_string(), Arc::new(router));
            } else {
                router_tasks.push(router);
            }
        }
    }
    let by_name: HashMap<String, Arc<HandlerRuntime>> = handlers
        .iter()
        .map(|h| (h.name.clone(), h.clone()))
        .collect();
    let tasks = Arc::new(BusTasks::new(shared.clone(), routers, by_name));
    let next_due = shared.delivery.scheduler.next_due();
    tasks.push_other(tokio::spawn(run_scheduler(
        scheduler_rx,
        shared.delivery.in_flight.clone(),
        next_due,
    )));
    for router in router_tasks {
        tasks.push_other(tokio::spawn(router.run()));
    }
    tasks
}

/// Starts auditing's background half: the publisher task, and the writer thread if there
/// are writers.
pub(crate) fn spawn_audit(
    tasks: &BusTasks,
    writers: Vec<Arc<dyn AuditWriter>>,
    flushes: flume::Receiver<tokio::sync::oneshot::Sender<()>>,
) -> Result<(), CoreError> {
    let writers = if writers.is_empty() {
        None
    } else {
        Some(spawn_writer_thread(writers).map_err(|e| {
            CoreError::Internal(format!("cannot start the audit writer thread: {e}"))
        })?)
    };
    tasks.push_other(tokio::spawn(run_audit_publisher(
        tasks.shared.clone(),
        writers,
        flushes,
    )));
    Ok(())
}

/// Publishes the bus's metrics to the `metrics` facade every `every`.
#[cfg(feature = "metrics")]
pub(crate) fn spawn_metrics_export(
    tasks: &BusTasks,
    manager: crate::bus::observe::metrics_manager::MetricsManager,
    every: std::time::Duration,
) {
    tasks.push_other(tokio::spawn(async move {
        let mut ticker = tokio::time::interval(crate::clock::period(every));
        loop {
            ticker.tick().await;
            manager.export();
        }
    }));
}
