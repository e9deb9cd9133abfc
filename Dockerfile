# chaosproxy as a sidecar: docker run -p 8080:8080 -v $PWD/scenarios:/scenarios chaosproxy
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    CHAOSPROXY_SCENARIOS=/scenarios

WORKDIR /app
COPY pyproject.toml README.md ./
COPY chaosproxy ./chaosproxy
COPY scenarios /scenarios
RUN pip install . \
    && useradd --system --uid 10001 --no-create-home chaosproxy

USER 10001:10001
EXPOSE 8080 8474
ENTRYPOINT ["chaosproxy"]
CMD ["serve", "--listen", "0.0.0.0:8080", "--admin", "0.0.0.0:8474"]
