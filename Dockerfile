# quickq-guard admission webhook image.
#
#   docker build -t ghcr.io/quickq/quickq-guard:0.1.0 .
#   docker run --rm -p 8443:8443 ghcr.io/quickq/quickq-guard:0.1.0 --self-signed   # for a look
#
# Stage 1 builds Kubernetes' CEL, a Go library (webhook/engine/cel/kubecel/), with the Go
# toolchain and the Go module proxy; stage 2 builds the wheel around it (setuptools only
# lives here); stage 3 installs just that wheel and its runtime dependencies, and runs as a
# numeric non-root user so Kubernetes can verify runAsNonRoot without reading /etc/passwd.
# Both base images are Debian bookworm: the library links against the glibc it runs on.

ARG GO_IMAGE=golang:1.26-bookworm
ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm

FROM ${GO_IMAGE} AS kubecel
WORKDIR /src
COPY webhook/engine/cel/kubecel/ ./
RUN CGO_ENABLED=1 go build -buildmode=c-shared -trimpath -ldflags="-s -w" \
        -o /out/_kubecel.so . \
    && rm -f /out/_kubecel.h

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY setup.py ./
COPY webhook/ webhook/
COPY policies/ policies/
# The library from stage 1; touched, so that setup.py finds it newer than its Go sources and
# does not look for Go here.
COPY --from=kubecel /out/_kubecel.so webhook/engine/cel/_kubecel.so
RUN touch webhook/engine/cel/_kubecel.so
RUN pip wheel --no-deps --wheel-dir /dist .

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="quickq-guard" \
      org.opencontainers.image.description="Kubernetes admission policy enforcer for GPU workloads" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
COPY --from=build /dist/ /tmp/dist/
# pip byte-compiles at install time, so a read-only root filesystem costs nothing at start-up.
# [server]: the webhook's own dependencies (uvicorn, starlette, cryptography, lightkube,
# prometheus-client), which a plain install for CI leaves out.
RUN wheel="$(echo /tmp/dist/quickq_guard-*.whl)" && pip install "${wheel}[server]" \
    && rm -rf /tmp/dist \
    && groupadd --gid 10001 quickq \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /var/lib/quickq-guard \
       --shell /usr/sbin/nologin quickq \
    && install -d -o 10001 -g 10001 /var/lib/quickq-guard
# The default policy directory; the Helm chart mounts its ConfigMap over it.
COPY policies/ /etc/quickq-guard/policies/
WORKDIR /var/lib/quickq-guard
USER 10001:10001
EXPOSE 8443
ENTRYPOINT ["quickq-guard", "serve"]
# Defaults for a bare `docker run`; the chart replaces them with its own arguments.
CMD ["--policies=/etc/quickq-guard/policies"]
