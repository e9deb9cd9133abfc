# chaosproxy as a sidecar: docker run -p 8080:8080 -v $PWD/my-scenarios:/scenarios chaosproxy
# (the built-in library is in the package; /scenarios adds to it and may stay empty)
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    CHAOSPROXY_SCENARIOS=/scenarios

WORKDIR /app
COPY pyproject.toml README.md ./
COPY chaosproxy ./chaosproxy
RUN pip install . \
    && mkdir /scenarios \
    && useradd --system --uid 10001 --no-create-home chaosproxy

USER 10001:10001
EXPOSE 8080 8478
ENTRYPOINT ["chaosproxy"]
CMD ["serve", "--listen", "0.0.0.0:8080", "--admin", "0.0.0.0:8478"]
