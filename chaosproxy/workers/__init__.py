"""``chaosproxy serve --workers N``: N processes serving one port (docs/operations.md,
Workers).

- :mod:`~chaosproxy.workers.supervisor`: starts the workers, runs the admin API, passes
  every change on and asks the workers for what they know, replaces a worker that dies
  and watches the scenario files;
- :mod:`~chaosproxy.workers.worker`: one worker, a whole proxy on the shared port;
- :mod:`~chaosproxy.workers.control`: the supervisor's channel to each worker;
- :mod:`~chaosproxy.workers.counters`: the request counters all workers share;
- :mod:`~chaosproxy.workers.handover`: a reconnect handed to the worker that keeps its
  stream;
- :mod:`~chaosproxy.workers.logfile`: one frame log of whole lines.

``--workers 1`` (the default) is none of this: one process, as ever.
"""
