// PLACEHOLDER: replaced by the request-path owner.
#pragma once
