# rotator's controller image: the package and its dependencies in a virtualenv on a slim Python.
# Build: make image (daemonless, buildah) or docker build -t rotator .
ARG PYTHON_IMAGE=docker.io/library/python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# A CA bundle for pip, when the build's network needs one (a path mounted into the build);
# empty means pip's own bundle. Nothing of it ends up in the image.
ARG PIP_CERT=""
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CERT=${PIP_CERT}
WORKDIR /src
RUN python3 -m venv /opt/rotator
COPY pyproject.toml README.md ./
COPY rotator ./rotator
COPY controllers ./controllers
# Compiled here: the root filesystem is read-only at run time, so Python could not cache bytecode
# and would recompile every module on each start (about 3 s).
RUN /opt/rotator/bin/pip install /src

FROM ${PYTHON_IMAGE}
ARG VERSION=dev
ARG REVISION=""
LABEL org.opencontainers.image.title="rotator" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.description="Keeps short-lived cloud credentials fresh for an AI gateway" \
      org.opencontainers.image.source="https://github.com/rotator-dev/rotator" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/rotator /opt/rotator
# MALLOC_ARENA_MAX: glibc gives each thread that allocates its own malloc arena (up to 8 per
# core), and the controller's ~40 threads (workers, informers, provider calls) each keep theirs
# part-empty; two arenas hold the same objects in less memory (docs/operations.md, "Memory").
ENV PATH=/opt/rotator/bin:${PATH} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MALLOC_ARENA_MAX=2
USER 65532:65532
EXPOSE 8443 8081
ENTRYPOINT ["rotator"]
CMD ["run", "--leader-elect"]
