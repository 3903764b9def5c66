module kct.dev/bench/loadgen

go 1.22
