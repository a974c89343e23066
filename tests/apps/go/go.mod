module qscope/qs_gopool

go 1.19
