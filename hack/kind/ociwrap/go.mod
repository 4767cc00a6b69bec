module rotator.dev/hack/kind/ociwrap

go 1.26.0
