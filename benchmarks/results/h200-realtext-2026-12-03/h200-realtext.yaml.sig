{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiJhNDM1Y2IyNzQxZTI2NTUxYjViNWE3OTdkYmUwYWFlMmI5ODNmODdjMTRhYWFkMjQxZDFhZjg1N2UwMmE0MzBiIn0sIm5hbWUiOiJoMjAwLXJlYWx0ZXh0LnlhbWwifV19",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "iFpPbfFiZ4GCXK2SHHBBkZJzVUf1w4q/auqV1e9gnZOVeXwA+HgReZxI1lR9pIK2EUk4Ru+Z8deGMIh9sOmhBg==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
