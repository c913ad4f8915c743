"""The daemon: the core's decisions wired to the edges. Read it in this order (docs/architecture.md tells the
same story from one metadata answer to the history entry):

1. compose.py builds every part from a `Config` and wires them into a `Daemon`; loop.py is the one loop
   that owns the lifecycle and runs the drain, and builds nothing; inbox.py is what it waits on.
2. What starts a drain: notice_timing.py (when a notice's SIGTERM goes), newcomers.py (who may be signalled).
3. The drain: runner.py runs it on the loop, draining.py walks `core/drain.py` against real processes,
   writeahead.py writes each wave ahead to the state file, index.py makes every full scan off the loop.
4. Telling: telling.py hands each moment to its subscribers: recorder.py (history), announce.py (journal),
   notices.py (webhooks), view.py and status_text.py (/status, `status`), systemd.py (READY=1,
   WATCHDOG=1, STATUS=), each under outputs.py's guards.
5. Beside the story: reporting.py (inputs' metrics and lines), device_watch.py,
   identity_learner.py, profile.py, gpucheck.py, departures.py, reload.py (SIGHUP), sighup.py (signals).
"""
