//! The read RPCs: status, topics, workers, metrics, WAL, one dead letter, audit, watch.

use std::time::SystemTime;

use event_base_core::constant::SYSTEM_PREFIX;
use tokio::sync::mpsc;
use tonic::Status;

use crate::convert::{self, PayloadCut};
use crate::dlq::page_size;
use crate::pb;
use crate::server::api::{AdminApi, AnswerStream};
use crate::server::watch::{self, WatchSelection};

/// Topics or workers on a page when the request says nothing, and at most.
const DEFAULT_LIST_PAGE: usize = 100;
const MAX_LIST_PAGE: usize = 1000;
/// Events buffered per watcher between the feed and the wire.
const WATCH_BUFFER: usize = 16;

/// An offset page token: the index of the first item, in decimal.
fn offset_of(token: &str) -> Result<usize, Status> {
    if token.is_empty() {
        return Ok(0);
    }
    token.parse().map_err(|_| {
        Status::invalid_argument(
            "`page_token` is not a token this server gave; pass `next_page_token` unchanged",
        )
    })
}

/// The page `[start, start + size)` of `items`, and the next token.
fn page<T>(items: Vec<T>, start: usize, size: usize) -> (Vec<T>, String, i32) {
    let total = i32::try_from(items.len()).unwrap_or(i32::MAX);
    let end = start.saturating_add(size).min(items.len());
    let next = if end < items.len() {
        end.to_string()
    } else {
        String::new()
    };
    let page = items
        .into_iter()
        .skip(start)
        .take(end.saturating_sub(start));
    (page.collect(), next, total)
}

fn is_system(topic: &str) -> bool {
    topic.starts_with(SYSTEM_PREFIX)
}

impl AdminApi {
    pub(crate) async fn status(
        &self,
        _req: &pb::GetStatusRequest,
    ) -> Result<pb::GetStatusResponse, Status> {
        let m = self.bus.metrics();
        let wal = self.bus.wal_stats();
        let started_at = SystemTime::now()
            .checked_sub(m.node.uptime)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let topics = self.bus.router().topics();
        let subs = || m.subscriptions.iter().filter(|s| !is_system(&s.topic));
        Ok(pb::GetStatusResponse {
            node_name: m.node_name.clone(),
            node_type: convert::node_type(m.node_type) as i32,
            bus_name: m.bus.clone(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            accepting: self.bus.is_accepting(),
            started_at: Some(convert::timestamp(started_at)),
            uptime: Some(convert::duration(m.node.uptime)),
            in_flight: m.node.in_flight,
            waiting_on_timers: m.node.waiting_on_timers,
            topic_count: topics.iter().filter(|t| !is_system(t)).count() as u32,
            worker_count: m.node.workers,
            dead_letter_count: wal.dead,
            wal: Some(convert::wal_stats(&**self.bus.wal())),
            paused_subscriptions: subs().filter(|s| s.paused).count() as u32,
            max_lag: subs().map(|s| s.lag).max().unwrap_or(0),
        })
    }

    pub(crate) fn topics(
        &self,
        req: &pb::ListTopicsRequest,
    ) -> Result<pb::ListTopicsResponse, Status> {
        let size = page_size(req.page_size, DEFAULT_LIST_PAGE, MAX_LIST_PAGE)?;
        let start = offset_of(&req.page_token)?;
        let metrics = self.bus.metrics();
        let mut names = self.bus.router().topics();
        names.retain(|t| req.include_system || !is_system(t));
        names.sort();
        let (names, next_page_token, total_size) = page(names, start, size);
        let topics = names
            .into_iter()
            .map(|name| {
                let mut subscriptions: Vec<pb::Subscription> = metrics
                    .subscriptions_of(&name)
                    .map(convert::subscription)
                    .collect();
                // By handler name: the snapshot sorts them so already; said here, not assumed.
                subscriptions.sort_by(|a, b| a.handler.cmp(&b.handler));
                pb::Topic {
                    workers: self.bus.workers(&name),
                    metrics: metrics.topic(&name).as_ref().map(convert::topic_metrics),
                    system: is_system(&name),
                    subscriptions,
                    name,
                }
            })
            .collect();
        Ok(pb::ListTopicsResponse {
            topics,
            next_page_token,
            total_size,
        })
    }

    pub(crate) fn workers(
        &self,
        req: &pb::ListWorkersRequest,
    ) -> Result<pb::ListWorkersResponse, Status> {
        let size = page_size(req.page_size, DEFAULT_LIST_PAGE, MAX_LIST_PAGE)?;
        let start = offset_of(&req.page_token)?;
        let mut statuses = Vec::new();
        for s in &req.statuses {
            match pb::WorkerStatus::try_from(*s) {
                Ok(pb::WorkerStatus::Unspecified) => {}
                Ok(status) => statuses.push(status),
                Err(_) => {
                    return Err(Status::invalid_argument(format!(
                        "`statuses` has {s}, which is not a WorkerStatus"
                    )))
                }
            }
        }
        let metrics = self.bus.metrics();
        let mut workers: Vec<_> = self
            .bus
            .registry()
            .list()
            .into_iter()
            .filter(|w| req.topic.is_empty() || w.topic.as_str() == req.topic)
            .filter(|w| req.include_system || !is_system(w.topic.as_str()))
            .filter(|w| statuses.is_empty() || statuses.contains(&convert::worker_status(w.status)))
            .collect();
        workers.sort_by(|a, b| a.name.cmp(&b.name));
        let (workers, next_page_token, total_size) = page(workers, start, size);
        Ok(pb::ListWorkersResponse {
            workers: workers
                .iter()
                .map(|w| convert::worker(w, metrics.worker(&w.name).as_ref()))
                .collect(),
            next_page_token,
            total_size,
        })
    }

    pub(crate) fn metrics(
        &self,
        req: &pb::GetMetricsRequest,
    ) -> Result<pb::GetMetricsResponse, Status> {
        let m = self.bus.metrics();
        let wanted = |topic: &str| req.topics.is_empty() || req.topics.iter().any(|t| t == topic);
        let workers = if req.include_workers {
            let topic_of: std::collections::HashMap<String, String> = self
                .bus
                .registry()
                .list()
                .into_iter()
                .map(|w| (w.name, w.topic.as_str().to_owned()))
                .collect();
            m.workers
                .iter()
                .filter(|(name, _)| topic_of.get(*name).is_none_or(|t| wanted(t)))
                .map(|(name, w)| (name.clone(), convert::worker_metrics(w)))
                .collect()
        } else {
            Default::default()
        };
        let handlers = if req.include_handlers {
            m.handlers
                .iter()
                .map(|(name, h)| (name.clone(), convert::topic_metrics(h)))
                .collect()
        } else {
            Default::default()
        };
        let subscriptions = if req.include_subscriptions {
            m.subscriptions
                .iter()
                .filter(|s| wanted(&s.topic))
                .map(convert::subscription)
                .collect()
        } else {
            Vec::new()
        };
        Ok(pb::GetMetricsResponse {
            taken_at: Some(convert::timestamp(SystemTime::now())),
            node: Some(convert::node_metrics(&m.node)),
            topics: m
                .topics
                .iter()
                .filter(|(name, _)| wanted(name))
                .map(|(name, t)| (name.clone(), convert::topic_metrics(t)))
                .collect(),
            handlers,
            workers,
            subscriptions,
        })
    }

    pub(crate) fn wal(
        &self,
        _req: &pb::GetWalStatsRequest,
    ) -> Result<pb::GetWalStatsResponse, Status> {
        Ok(pb::GetWalStatsResponse {
            stats: Some(convert::wal_stats(&**self.bus.wal())),
        })
    }

    pub(crate) async fn dead_letter(
        &self,
        req: &pb::GetDeadLetterRequest,
    ) -> Result<pb::GetDeadLetterResponse, Status> {
        if req.id.is_empty() {
            return Err(Status::invalid_argument(
                "`id` is empty; give the id of a dead letter (see ListDeadLetters)",
            ));
        }
        let dead = crate::dlq::find(&self.bus, &req.id).await?;
        Ok(pb::GetDeadLetterResponse {
            dead_letter: Some(convert::dead_letter(&dead, PayloadCut::Whole)),
        })
    }

    pub(crate) fn audit(
        &self,
        req: &pb::GetMessageAuditRequest,
    ) -> Result<pb::GetMessageAuditResponse, Status> {
        if req.message_id.is_empty() {
            return Err(Status::invalid_argument(
                "`message_id` is empty; give a message id",
            ));
        }
        Ok(pb::GetMessageAuditResponse {
            records: self
                .bus
                .audit()
                .for_message(&req.message_id)
                .iter()
                .map(convert::audit_record)
                .collect(),
        })
    }

    pub(crate) fn watch_stream(
        &self,
        req: &pb::WatchRequest,
    ) -> Result<AnswerStream<pb::WatchResponse>, Status> {
        let selection = WatchSelection::from_pb(req)?;
        let registry = self.bus.registry();
        let missing: Vec<&str> = selection
            .needs_handlers()
            .into_iter()
            .filter(|(handler, _)| registry.get(&format!("{handler}-0")).is_none())
            .map(|(_, kind)| kind)
            .collect();
        if !missing.is_empty() {
            return Err(Status::failed_precondition(format!(
                "this bus was built without the watch feed's handlers for {}, so it does not \
                 announce those events to the server: add the feed's handlers to the bus's \
                 builder (`WatchFeed::register` or `WatchFeed::handlers()`; for audit records \
                 a feed made `with_audit(true)`) and pass the feed to \
                 `GrpcServer::builder(..).watch_feed(..)`, or watch other kinds",
                missing.join(", ")
            )));
        }
        // Subscribed before answering, so nothing that happens after the call is missed.
        let rx = self.feed.subscribe();
        let (tx, out) = mpsc::channel(WATCH_BUFFER);
        tokio::spawn(watch::forward(
            rx,
            selection,
            self.bus.clone(),
            tx,
            self.stop.clone(),
        ));
        Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(out)))
    }
}
