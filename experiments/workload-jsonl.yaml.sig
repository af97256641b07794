{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiIyOWVkNzZmMDc1M2YwODNiNGUyNzAyNGVlNTFhODEwNGY0ZmM4ZDhkOGM0MDk3ODJkMjVkNDQzMGJkMjEyNGE4In0sIm5hbWUiOiJ3b3JrbG9hZC1qc29ubC55YW1sIn1dfQ==",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "2i/16qRIRul3bKsW2OpSlFlocl0ZQT+YF4raEKrTUquFfWZ3W514g+LAnz8YYocttXSBS0TPHPNDU0wMFhzSAQ==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
