# chaosproxy as a sidecar: docker run -p 8080:8080 -v $PWD/my-scenarios:/scenarios chaosproxy
# (the built-in library is in the package; /scenarios adds to it and may stay empty)
#
# The image starts with no configuration: the proxy on 0.0.0.0:8080, the admin API on
# loopback inside the container only (the HEALTHCHECK uses it there). To publish the
# admin API, give it an address and a token:
#   docker run -p 8080:8080 -p 8478:8478 -e CHAOSPROXY_ADMIN=0.0.0.0:8478
#     -e CHAOSPROXY_ADMIN_TOKEN=... chaosproxy
# (off loopback without a token it refuses to start). Settings come from CHAOSPROXY_*
# variables, so the command below passes no flag that would override them.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    CHAOSPROXY_SCENARIOS=/scenarios \
    CHAOSPROXY_LISTEN=0.0.0.0:8080 \
    CHAOSPROXY_ADMIN=127.0.0.1:8478

WORKDIR /app
COPY pyproject.toml README.md ./
COPY chaosproxy ./chaosproxy
RUN pip install . \
    && mkdir /scenarios \
    && useradd --system --uid 10001 --no-create-home chaosproxy

USER 10001:10001
# 8478 (the admin API) is reachable from outside only once CHAOSPROXY_ADMIN publishes it.
EXPOSE 8080 8478
# SIGTERM (docker stop): streams in flight get --grace (2s), the process exits within 3s.
STOPSIGNAL SIGTERM
# Slim images have no curl. The admin's address comes from CHAOSPROXY_ADMIN (a wildcard
# is asked on loopback); with the admin off there is nothing to ask.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request as u; h, _, p = os.environ.get('CHAOSPROXY_ADMIN', '127.0.0.1:8478').rpartition(':'); h = h.strip('[]'); h = {'': '127.0.0.1', '0.0.0.0': '127.0.0.1', '::': '::1'}.get(h, h); h = '[' + h + ']' if ':' in h else h; p == 'off' or u.urlopen('http://' + h + ':' + p + '/health', timeout=2)"]
ENTRYPOINT ["chaosproxy"]
CMD ["serve"]
