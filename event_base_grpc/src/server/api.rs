//! [`AdminApi`]: the `AdminService` implementation. Each RPC checks its scope first, then
//! hands the request to `read.rs` or `write.rs`.

use std::pin::Pin;

use event_base_core::EventBus;
use tokio_stream::Stream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use crate::auth::{require, Scope};
use crate::pb;
use crate::pb::admin_service_server::AdminService;
use crate::server::watch::WatchFeed;

/// A stream of answers, as the server-streaming RPCs return it.
pub(crate) type AnswerStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// The service: the bus, the watch feed, and the server's stop signal (which ends streams).
#[derive(Debug, Clone)]
pub(crate) struct AdminApi {
    pub(crate) bus: EventBus,
    pub(crate) feed: WatchFeed,
    pub(crate) stop: CancellationToken,
}

impl AdminApi {
    pub(crate) fn new(bus: EventBus, feed: WatchFeed, stop: CancellationToken) -> Self {
        AdminApi { bus, feed, stop }
    }
}

/// Checks the scope, then answers with `body(request)`.
macro_rules! rpc {
    ($req:ident, $scope:expr, $name:literal, $body:expr) => {{
        require(&$req, $scope, $name)?;
        let $req = $req.into_inner();
        $body.map(Response::new)
    }};
}

#[tonic::async_trait]
impl AdminService for AdminApi {
    async fn get_status(
        &self,
        req: Request<pb::GetStatusRequest>,
    ) -> Result<Response<pb::GetStatusResponse>, Status> {
        rpc!(req, Scope::Read, "GetStatus", self.status(&req).await)
    }

    async fn list_topics(
        &self,
        req: Request<pb::ListTopicsRequest>,
    ) -> Result<Response<pb::ListTopicsResponse>, Status> {
        rpc!(req, Scope::Read, "ListTopics", self.topics(&req))
    }

    async fn list_workers(
        &self,
        req: Request<pb::ListWorkersRequest>,
    ) -> Result<Response<pb::ListWorkersResponse>, Status> {
        rpc!(req, Scope::Read, "ListWorkers", self.workers(&req))
    }

    async fn get_metrics(
        &self,
        req: Request<pb::GetMetricsRequest>,
    ) -> Result<Response<pb::GetMetricsResponse>, Status> {
        rpc!(req, Scope::Read, "GetMetrics", self.metrics(&req))
    }

    async fn get_wal_stats(
        &self,
        req: Request<pb::GetWalStatsRequest>,
    ) -> Result<Response<pb::GetWalStatsResponse>, Status> {
        rpc!(req, Scope::Read, "GetWalStats", self.wal(&req))
    }

    async fn list_dead_letters(
        &self,
        req: Request<pb::ListDeadLettersRequest>,
    ) -> Result<Response<pb::ListDeadLettersResponse>, Status> {
        rpc!(
            req,
            Scope::Read,
            "ListDeadLetters",
            crate::dlq::list(&self.bus, &req).await
        )
    }

    async fn get_dead_letter(
        &self,
        req: Request<pb::GetDeadLetterRequest>,
    ) -> Result<Response<pb::GetDeadLetterResponse>, Status> {
        rpc!(
            req,
            Scope::Read,
            "GetDeadLetter",
            self.dead_letter(&req).await
        )
    }

    async fn get_message_audit(
        &self,
        req: Request<pb::GetMessageAuditRequest>,
    ) -> Result<Response<pb::GetMessageAuditResponse>, Status> {
        rpc!(req, Scope::Read, "GetMessageAudit", self.audit(&req))
    }

    type WatchStream = AnswerStream<pb::WatchResponse>;

    async fn watch(
        &self,
        req: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        rpc!(req, Scope::Read, "Watch", self.watch_stream(&req))
    }

    async fn publish(
        &self,
        req: Request<pb::PublishRequest>,
    ) -> Result<Response<pb::PublishResponse>, Status> {
        rpc!(req, Scope::Admin, "Publish", self.publish_one(req).await)
    }

    async fn publish_batch(
        &self,
        req: Request<pb::PublishBatchRequest>,
    ) -> Result<Response<pb::PublishBatchResponse>, Status> {
        rpc!(
            req,
            Scope::Admin,
            "PublishBatch",
            self.publish_many(req).await
        )
    }

    async fn replay_dead_letter(
        &self,
        req: Request<pb::ReplayDeadLetterRequest>,
    ) -> Result<Response<pb::ReplayDeadLetterResponse>, Status> {
        rpc!(
            req,
            Scope::Admin,
            "ReplayDeadLetter",
            self.replay_single(req).await
        )
    }

    type ReplayDeadLettersStream = AnswerStream<pb::ReplayDeadLettersResponse>;

    async fn replay_dead_letters(
        &self,
        req: Request<pb::ReplayDeadLettersRequest>,
    ) -> Result<Response<Self::ReplayDeadLettersStream>, Status> {
        rpc!(
            req,
            Scope::Admin,
            "ReplayDeadLetters",
            self.replay_bulk(req).await
        )
    }

    async fn purge_dead_letters(
        &self,
        req: Request<pb::PurgeDeadLettersRequest>,
    ) -> Result<Response<pb::PurgeDeadLettersResponse>, Status> {
        rpc!(
            req,
            Scope::Admin,
            "PurgeDeadLetters",
            crate::dlq::purge(&self.bus, &req).await
        )
    }

    async fn add_workers(
        &self,
        req: Request<pb::AddWorkersRequest>,
    ) -> Result<Response<pb::AddWorkersResponse>, Status> {
        rpc!(req, Scope::Admin, "AddWorkers", self.scale_up(&req).await)
    }

    async fn remove_worker(
        &self,
        req: Request<pb::RemoveWorkerRequest>,
    ) -> Result<Response<pb::RemoveWorkerResponse>, Status> {
        rpc!(
            req,
            Scope::Admin,
            "RemoveWorker",
            self.scale_down(&req).await
        )
    }

    async fn pause_subscription(
        &self,
        req: Request<pb::PauseSubscriptionRequest>,
    ) -> Result<Response<pb::PauseSubscriptionResponse>, Status> {
        rpc!(
            req,
            Scope::Admin,
            "PauseSubscription",
            self.pause(&req.topic, &req.handler)
        )
    }

    async fn resume_subscription(
        &self,
        req: Request<pb::ResumeSubscriptionRequest>,
    ) -> Result<Response<pb::ResumeSubscriptionResponse>, Status> {
        rpc!(
            req,
            Scope::Admin,
            "ResumeSubscription",
            self.resume(&req.topic, &req.handler)
        )
    }

    async fn shutdown(
        &self,
        req: Request<pb::ShutdownRequest>,
    ) -> Result<Response<pb::ShutdownResponse>, Status> {
        rpc!(req, Scope::Admin, "Shutdown", self.stop_bus(&req).await)
    }

    async fn cancel_message(
        &self,
        req: Request<pb::CancelMessageRequest>,
    ) -> Result<Response<pb::CancelMessageResponse>, Status> {
        rpc!(
            req,
            Scope::Admin,
            "CancelMessage",
            self.cancel(&req.id).await
        )
    }

    async fn list_schedules(
        &self,
        req: Request<pb::ListSchedulesRequest>,
    ) -> Result<Response<pb::ListSchedulesResponse>, Status> {
        rpc!(req, Scope::Read, "ListSchedules", self.list_schedules(&req))
    }

    async fn unschedule(
        &self,
        req: Request<pb::UnscheduleRequest>,
    ) -> Result<Response<pb::UnscheduleResponse>, Status> {
        rpc!(
            req,
            Scope::Admin,
            "Unschedule",
            self.remove_schedule(&req.name).await
        )
    }
}
