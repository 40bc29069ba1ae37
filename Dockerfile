# llmjudge image. Untested here (no Docker engine on the build machines); see README.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    LLMJUDGE_HOST=0.0.0.0 LLMJUDGE_PORT=8000 LLMJUDGE_DATA_DIR=/data

RUN useradd --create-home --uid 10001 llmjudge && mkdir -p /data /app && chown llmjudge /data
WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY src ./src
COPY alembic ./alembic
COPY templates ./templates
COPY static ./static
RUN pip install --no-cache-dir -e .

USER llmjudge
EXPOSE 8000
VOLUME ["/data"]
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s \
  CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4).status == 200 else 1)"
CMD ["llmjudge", "serve"]
