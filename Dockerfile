# tiercompact service image: the project installed into its own venv (the top-level
# package names log/remote/metadata/... are generic, so the service never shares
# site-packages with other distributions; see CONVENTIONS note a).
FROM python:3.11-slim-bookworm

# Java for the Spark driver (spark-clean); PySpark runs executors on the cluster.
# gcc + libc headers compile the kernels (log/record/_codec.pyx, cleaner/kernels/_fastpath.pyx,
# setup.py) at install;
# libssl-dev lets setup.py link the key-index kernel to OpenSSL's libcrypto (its MD5), whose
# runtime library libssl3 stays (named here so the purge below cannot auto-remove it).
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless tini libssl3 gcc libc6-dev libssl-dev \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/tiercompact
COPY pyproject.toml setup.py README.md ./
COPY log ./log
COPY metadata ./metadata
COPY remote ./remote
COPY cleaner ./cleaner
COPY coordinator ./coordinator
COPY service ./service
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir '.[spark]' \
 && cd / && /opt/venv/bin/python -c "from log.record import _codec; from cleaner.kernels import _fastpath; assert _codec.MD5_KEYS" \
 && apt-get purge -y --auto-remove gcc libc6-dev libssl-dev \
 && /opt/venv/bin/python -c "from log.record import _codec; from cleaner.kernels import _fastpath; assert _codec.MD5_KEYS"
ENV PATH=/opt/venv/bin:$PATH \
    TIERCOMPACT_DATA_DIR=/var/lib/tiercompact \
    TIERCOMPACT_HOST=0.0.0.0 \
    TIERCOMPACT_PORT=8080 \
    TIERCOMPACT_KAFKA_PORT=9092

RUN useradd --system --home /var/lib/tiercompact tiercompact \
 && mkdir -p /var/lib/tiercompact && chown tiercompact /var/lib/tiercompact
USER tiercompact
VOLUME /var/lib/tiercompact
EXPOSE 8080 9092
HEALTHCHECK --interval=10s --timeout=3s CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8080/healthz').status == 200 else 1)"
ENTRYPOINT ["tini", "--", "tiercompact"]
CMD ["serve"]
