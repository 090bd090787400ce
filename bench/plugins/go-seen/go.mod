module strait.bench/go-seen

go 1.21

require github.com/Kong/go-pdk v0.11.0
