module github.com/flagstream/flagstream/sdk/go

go 1.19
