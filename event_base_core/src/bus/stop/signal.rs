//! Waiting for the process's termination signals (SIGINT, SIGTERM; Ctrl-C elsewhere).

use crate::error::CoreError;

pub(crate) struct ShutdownSignal {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl ShutdownSignal {
    /// Installs the handlers now.
    pub(crate) fn install() -> Result<Self, CoreError> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let err = |e: std::io::Error| {
                CoreError::Internal(format!("cannot install signal handler: {e}"))
            };
            Ok(ShutdownSignal {
                interrupt: signal(SignalKind::interrupt()).map_err(err)?,
                terminate: signal(SignalKind::terminate()).map_err(err)?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(ShutdownSignal {})
        }
    }

    /// Waits for the next signal; returns its name.
    pub(crate) async fn recv(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.interrupt.recv() => "SIGINT",
                _ = self.terminate.recv() => "SIGTERM",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = &mut *self;
            let _ = tokio::signal::ctrl_c().await;
            "ctrl-c"
        }
    }
}
