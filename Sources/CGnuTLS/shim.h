#ifndef CGNUTLS_SHIM_H
#define CGNUTLS_SHIM_H
#include <gnutls/gnutls.h>
#include <gnutls/crypto.h>
#endif
