# The worker image: one static binary on distroless, running as a non-root user.
#
#   docker build -t mapagg/worker:dev .
#   docker run --rm mapagg/worker:dev env        # the environment variables it reads
#
# The build stage runs on the build machine and cross-compiles for the target platform, so a
# multi-platform build (docker buildx build --platform linux/amd64,linux/arm64 .) needs no emulation.
#
# It builds with BuildKit and with the classic builder (DOCKER_BUILDKIT=0, Engine 20.10): the
# platform arguments have defaults for the classic builder, which does not set them ("linux" is
# the build machine's own architecture; empty GOOS/GOARCH build for it), and no instruction needs
# BuildKit (no RUN --mount: Go's build cache lives only in the layer). There is no `# syntax=`
# line either: BuildKit would fetch that frontend image from a registry before building, which
# fails offline; the frontend built into the engine reads this file. node/compose_test.go checks it.

ARG GO_VERSION=1.26

FROM --platform=${BUILDPLATFORM:-linux} golang:${GO_VERSION} AS build
WORKDIR /src
# Modules first: this layer is rebuilt only when go.mod or go.sum change.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG TARGETOS
ARG TARGETARCH
# CGO off: a static binary that needs no libc in the final image.
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -buildvcs=false -ldflags='-s -w' -o /out/worker ./cmd/worker

# distroless/static: CA certificates, /etc/passwd with the nonroot user (65532), tzdata; no shell.
FROM gcr.io/distroless/static-debian13:nonroot
COPY --from=build /out/worker /usr/local/bin/worker
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/worker"]
CMD ["run"]
# `worker health` GETs the local worker's /readyz (HTTP_ADDR, default :8080): 200 only when this
# worker reaches storage and NATS and, on the leader, its coordinator's main loop is turning. The
# image has no shell or curl, hence a worker subcommand. A dead worker process ends the container.
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/worker", "health"]
