package proto

//go:generate go run ../internal/gencalls -spec calls.def -go zz_calls.go -c ../interposer/zz_calls.c -h ../interposer/zz_calls.h
