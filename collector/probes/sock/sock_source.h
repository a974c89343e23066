// The sock probe family (bpf/sock.bpf.c): accept queue, connector queue, in flight and
// downstream peers. make_sock_source() (below) builds it; the helpers below are the parts
// of its user-space logic that need no kernel, exposed for unit tests.
#pragma once
#include <linux/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#ifndef __always_inline
#define __always_inline inline
#endif
extern "C" {
#include "sock.h"
}

#include "engine/source.h"

namespace qscope {

// "10.0.0.5:5432", "[::1]:8080"; IPv4-mapped IPv6 peers shown as IPv4.
std::string peer_label(const qs_peer_key& k);

// sk_drops of a listener counts SYN-stage overflows once and ACK-stage ones twice, and each
// ACK-stage overflow also shows as one kfree_skb(TCP_LISTEN_OVERFLOW) (docs/kernel.md):
// overflows = drops - skb_drops, never negative.
uint64_t listen_overflows(uint64_t sk_drops_delta, uint64_t overflow_skb_drops_delta);

std::unique_ptr<Source> make_sock_source();

}  // namespace qscope
