"""Interrupts (Ctrl-C, SIGTERM, SIGHUP) during a run: raised where they land, recorded, and held back
while cleanup that must finish runs.

Inside `signals_raise_interrupt()` (main thread only) SIGINT raises `Interrupted` (a KeyboardInterrupt) and
SIGTERM/SIGHUP raise `Terminated` (a KeyboardInterrupt), so every `finally` and context manager
unwinds and stops its servers instead of the process dying with servers left behind. The first signal
is recorded (`interrupt_received`): an interrupt can land while requests are in flight and tear their
connections down, and the record keeps the run's outcome an interruption, never a failed trial.

Inside `interrupts_deferred()` a signal is only recorded, and raised when the block ends: stopping a
server or writing the last records of a trial cannot be cut in half (a server stopped halfway would
outlive the harness; a trial record would say `running` forever). `interrupts_held()` records without
ever raising (the run's own bookkeeping, which reads `interrupt_received()`), with
`interrupts_allowed()` inside it for the work that may be interrupted. A second signal never
interrupts the cleanup of the first; it only makes server stops skip their grace period (`hurry`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C as the harness raises it. A subclass, never KeyboardInterrupt itself: a `python -m`
    process ends by SIGINT, whatever its exit code, once a bare KeyboardInterrupt escaped any
    PyRun_String call in its life (CPython's Py_RunMain; Cython's modules run some at import), even
    one the harness handled (benchmarks/faults.py, seed 34: exit -2 after its "interrupted" line)."""

    def __init__(self, signum: int = signal.SIGINT, message: str = ""):
        super().__init__(*([message] if message else []))
        self.signum = signum


class Terminated(Interrupted):
    """The harness got SIGTERM or SIGHUP: unwind like Ctrl-C, so every cleanup path runs."""

    def __init__(self, signum: int):
        super().__init__(signum, f"terminated by {signal.Signals(signum).name}")


_active = 0  # nesting depth of signals_raise_interrupt
_interrupted_by: int | None = None
_signals_seen = 0
_deferred = 0  # nesting depth of interrupts_deferred
_pending = False  # an interrupt arrived while deferred and has not been raised yet
_cancel_loop: Callable[[], None] | None = None  # set while `run_async` runs an event loop


def interrupt_received() -> int | None:
    """The signal number of the first interrupt received inside `signals_raise_interrupt`, if any."""
    return _interrupted_by


def hurry() -> bool:
    """A second interrupt arrived: cleanup should not wait out grace periods."""
    return _signals_seen >= 2


def interrupt_exception(signum: int) -> KeyboardInterrupt:
    return Interrupted() if signum == signal.SIGINT else Terminated(signum)


def interrupt_signum(exc: KeyboardInterrupt) -> int:
    """The signal an interrupt carries (a bare KeyboardInterrupt, raised before the handlers were in
    place, is Ctrl-C)."""
    return getattr(exc, "signum", signal.SIGINT)


def interrupt_text(signum: int) -> str:
    """`interrupted (Ctrl-C)` or `interrupted (terminated by SIGTERM)`: the reason a run records."""
    return "interrupted (Ctrl-C)" if signum == signal.SIGINT else f"interrupted (terminated by {signal.Signals(signum).name})"


def raise_if_interrupted() -> None:
    """Raise the interrupt again if one was received (for code that may have swallowed it, e.g. an
    event loop that turned it into cancelled requests)."""
    if _active and _interrupted_by is not None:
        raise interrupt_exception(_interrupted_by)


def _deliver() -> None:
    """Raise the interrupt, or, while an event loop runs (`run_async`), cancel its main task: an
    exception raised in the middle of the loop would escape from whichever task or callback it
    landed in, leave the others to be torn down during shutdown (with asyncio logging each one) and
    could be taken for a failed request. A cancelled task unwinds cleanly; `run_async` then raises."""
    if _cancel_loop is not None:
        _cancel_loop()
    else:
        raise_if_interrupted()


def _handler(signum: int, _frame: object) -> None:
    global _interrupted_by, _signals_seen, _pending
    _signals_seen += 1
    if _interrupted_by is not None:
        return  # a second signal while unwinding must not interrupt the cleanup
    _interrupted_by = signum
    if _deferred:
        _pending = True
    else:
        _deliver()


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Cleanup that must run to its end: an interrupt that lands inside is raised when it ends.
    Off the main thread it does nothing: signals land in the main thread, and one deferred by
    another thread would be raised in that thread."""
    global _deferred, _pending
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _deferred += 1
    try:
        yield
    finally:
        _deferred -= 1
        if _deferred == 0 and _pending:
            _pending = False
            _deliver()  # replaces an exception in flight: the interrupt is what ended it


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Like `interrupts_deferred`, but an interrupt is never raised here: the caller reads
    `interrupt_received()`. Code that may be interrupted runs inside `interrupts_allowed()`."""
    global _deferred
    _deferred += 1
    try:
        yield
    finally:
        _deferred -= 1


@contextlib.contextmanager
def interrupts_allowed() -> Iterator[None]:
    """Inside `interrupts_held()`: interrupts raise again (one held back so far is raised at once)."""
    global _deferred, _pending
    saved, _deferred = _deferred, 0
    try:
        if _pending:
            _pending = False
            _deliver()
        yield
    finally:
        _deferred = saved


def exit_code_after(code: int) -> int:
    """A command's exit code, or 128 + signal when an interrupt was received that the command never
    saw: one raised inside a finalizer (`__del__`, a generator closed by the collector) cannot
    propagate, and the command went on to its end."""
    if _interrupted_by is not None and code < 128:
        return 128 + _interrupted_by
    return code


def _make_unraisable_hook(previous: Callable[[Any], object]) -> Callable[[Any], None]:
    def hook(unraisable: Any) -> None:
        # An interrupt raised inside a finalizer: Python would print it as "Exception ignored in"
        # with a traceback and go on. It is recorded: `raise_if_interrupted` raises it at the run's
        # next check, and `exit_code_after` gives the exit code.
        if isinstance(unraisable.exc_value, KeyboardInterrupt) and _interrupted_by is not None:
            return
        previous(unraisable)
    return hook


@contextlib.contextmanager
def signals_raise_interrupt() -> Iterator[None]:
    """Install the handlers (main thread only; nested use is a no-op). The record starts empty."""
    global _active, _interrupted_by, _signals_seen, _pending
    if threading.current_thread() is not threading.main_thread() or _active:
        yield
        return
    _interrupted_by, _signals_seen, _pending = None, 0, False
    # A signal the harness was started to ignore stays ignored (`nohup`: SIGHUP; a background job
    # of a script: SIGINT).
    previous = {sig: signal.signal(sig, _handler) for sig in SIGNALS if signal.getsignal(sig) is not signal.SIG_IGN}
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _make_unraisable_hook(previous_hook)
    _active += 1
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sys.unraisablehook = previous_hook
        _active -= 1


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(coro)` for the harness: an interrupt while it runs cancels the coroutine (requests
    in flight unwind as cancelled, never recorded as failed) and is raised once the loop is closed.
    Called where a loop already runs in this thread (Playwright's sync API, a notebook), whose loop
    asyncio cannot nest, it runs on a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run_async(coro)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="harness-run-async") as pool:
        return pool.submit(_run_async, coro).result()


def _run_async(coro: Coroutine[Any, Any, T]) -> T:
    global _cancel_loop
    previous = _cancel_loop
    runner = asyncio.Runner()
    try:
        loop = runner.get_loop()
        task = loop.create_task(coro)

        def cancel() -> None:
            # Called from the signal handler, which runs between any two bytecodes of the loop's
            # own code: cancelling right here (as asyncio.Runner does) can cancel a future that a
            # callback has just found pending and is about to resolve (InvalidStateError, logged
            # as a fatal protocol error). The loop's next turn is a safe point; the self-pipe
            # write also wakes a loop that waits in select().
            if not loop.is_closed():
                loop.call_soon_threadsafe(task.cancel)

        _cancel_loop = cancel
        if _active and _interrupted_by is not None:
            task.cancel()  # an interrupt already arrived: start no new work
        cancelled = False
        try:
            result = loop.run_until_complete(task)
        except asyncio.CancelledError:
            if not (_active and _interrupted_by is not None):
                raise
            cancelled = True
    finally:
        runner.close()  # cancels what is left; an interrupt meanwhile only cancels, never raises
        _cancel_loop = previous
    raise_if_interrupted()
    if cancelled:  # by the interrupt raised just above: never a result that is not one
        raise asyncio.CancelledError
    return result
