module kct.local/nodeimages

go 1.22
