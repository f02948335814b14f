"""``python -m medusa.sunion --config FILE``: runs one SUnion until SIGTERM or SIGINT.

A signal only asks the loop to stop: the transaction in progress commits (or is
aborted on an error) before the process exits, with status 0 on a clean stop.

With ``--go-file FILE`` it starts up and then waits until FILE exists before it opens
(and so fences the SUnion it replaces): a warm move's replica has its SUnion ready to go
the moment the old node lets go of the fragment.

With ``--parent-pid PID`` it stops as on SIGTERM once it is no longer PID's child: the
node that started it has gone (killed, or stopped by Ctrl-C), and nothing else would.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

from medusa import tracing
from medusa.sunion.config import load_config
from medusa.sunion.service import FENCED_EXIT, SUnion, SUnionError, SUnionFencedError

log = logging.getLogger("medusa.sunion")

PARENT_CHECK_S = 1.0
"""How often a SUnion started with ``--parent-pid`` looks for its parent."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m medusa.sunion", description=__doc__)
    parser.add_argument("--config", required=True, help="the SUnion's JSON configuration")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--go-file", help="start only once this file exists")
    parser.add_argument("--parent-pid", type=int,
                        help="stop once no longer this process's child (the node's pid)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    config = load_config(args.config)
    if config.otlp_endpoint:
        tracing.configure("medusa-sunion", config.otlp_endpoint)
    stop = threading.Event()

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        log.info("%s: %s received, stopping", config.fragment, signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    if args.parent_pid:
        threading.Thread(target=_stop_without_parent, args=(args.parent_pid, stop, config.fragment),
                         name="parent-watch", daemon=True).start()
    sunion = SUnion(config)
    try:
        if args.go_file:
            sunion.prepare()
            log.info("%s: ready; waiting for %s", config.fragment, args.go_file)
            while not Path(args.go_file).exists():
                if stop.is_set():
                    return 0
                time.sleep(0.02)
        sunion.run(stop)  # opens it, fencing the SUnion it replaces
    except SUnionFencedError as error:
        log.warning("%s", error)
        return FENCED_EXIT
    except SUnionError as error:
        log.error("%s", error)
        return 1
    finally:
        sunion.close()
        tracing.shutdown()  # the last period's trace goes out before the process ends
    return 0


def _stop_without_parent(parent_pid: int, stop: threading.Event, fragment: str) -> None:
    """Asks the loop to stop once the process is no longer ``parent_pid``'s child."""
    while not stop.wait(PARENT_CHECK_S):
        if os.getppid() != parent_pid:
            log.warning("%s: the node that started it (pid %d) has gone; stopping", fragment,
                        parent_pid)
            stop.set()
            return


if __name__ == "__main__":
    sys.exit(main())
